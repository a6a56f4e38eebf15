package dev.kvtransfer.distribution;

import org.junit.jupiter.api.Test;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;
import org.w3c.dom.NodeList;

import javax.xml.parsers.DocumentBuilderFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The two POMs a user gets instead of kvtransfer-parent stay in step with it: kvtransfer-plugin-parent pins every
 * build plugin kvtransfer-parent pins that a plugin project runs, at the same versions, and imports the BOM;
 * kvtransfer-bom manages every jar module of the reactor at the reactor's version.
 */
class BuildPinsTest {
    private static final Path ROOT = Path.of(System.getProperty("kvtransfer.root"));

    private static Element pom(Path p) throws Exception {
        Document d = DocumentBuilderFactory.newInstance().newDocumentBuilder().parse(p.toFile());
        return d.getDocumentElement();
    }

    private static Element child(Element e, String name) {
        for (Node n = e.getFirstChild(); n != null; n = n.getNextSibling()) {
            if (n instanceof Element c && c.getTagName().equals(name)) {
                return c;
            }
        }
        return null;
    }

    private static String text(Element e, String name) {
        Element c = child(e, name);
        return c == null ? null : c.getTextContent().trim();
    }

    private static String resolve(Element project, String value) {
        if (value != null && value.startsWith("${") && value.endsWith("}")) {
            String key = value.substring(2, value.length() - 1);
            if (key.equals("project.version")) {
                return text(project, "version");
            }
            return text(child(project, "properties"), key);
        }
        return value;
    }

    private static Map<String, String> pluginPins(Element project) {
        Map<String, String> pins = new TreeMap<>();
        NodeList plugins = child(child(child(project, "build"), "pluginManagement"), "plugins")
                .getElementsByTagName("plugin");
        for (int i = 0; i < plugins.getLength(); i++) {
            Element p = (Element) plugins.item(i);
            pins.put(text(p, "artifactId"), resolve(project, text(p, "version")));
        }
        return pins;
    }

    @Test
    void thePluginParentPinsTheBuildPluginsAtKvtransferParentsVersions() throws Exception {
        Element parent = pom(ROOT.resolve("pom.xml"));
        Element pluginParent = pom(ROOT.resolve("plugin-parent/pom.xml"));
        Map<String, String> ours = pluginPins(parent);
        Map<String, String> theirs = pluginPins(pluginParent);
        List<String> jarLifecycle = List.of("maven-clean-plugin", "maven-resources-plugin", "maven-compiler-plugin",
                "maven-surefire-plugin", "maven-failsafe-plugin", "maven-jar-plugin", "maven-install-plugin",
                "maven-deploy-plugin", "maven-assembly-plugin", "maven-dependency-plugin");
        for (String p : jarLifecycle) {
            assertThat(theirs).as("plugin parent pins %s", p).containsKey(p);
            assertThat(theirs.get(p)).as("version of %s", p).isEqualTo(ours.get(p));
        }
        assertThat(text(child(pluginParent, "properties"), "kvtransfer.jvm.flags"))
                .isEqualTo(text(child(parent, "properties"), "kvtransfer.jvm.flags"));
        assertThat(text(child(pluginParent, "properties"), "junit.version"))
                .isEqualTo(text(child(parent, "properties"), "junit.version"));
        assertThat(text(pluginParent, "version")).isEqualTo(text(parent, "version"));
        assertThat(text(child(pluginParent, "properties"), "kvtransfer.version")).isEqualTo(text(parent, "version"));
        assertThat(child(pluginParent, "parent")).as("the plugin parent inherits nothing of kvtransfer's build").isNull();
    }

    @Test
    void theBomManagesEveryJarModuleAtTheReactorsVersion() throws Exception {
        Element parent = pom(ROOT.resolve("pom.xml"));
        Element bom = pom(ROOT.resolve("bom/pom.xml"));
        assertThat(text(bom, "version")).isEqualTo(text(parent, "version"));
        assertThat(child(bom, "parent")).isNull();
        List<String> managed = new ArrayList<>();
        NodeList deps = child(child(bom, "dependencyManagement"), "dependencies").getElementsByTagName("dependency");
        for (int i = 0; i < deps.getLength(); i++) {
            Element d = (Element) deps.item(i);
            assertThat(resolve(bom, text(d, "version"))).isEqualTo(text(parent, "version"));
            managed.add(text(d, "artifactId"));
        }
        List<String> jarModules = new ArrayList<>();
        NodeList modules = child(parent, "modules").getElementsByTagName("module");
        for (int i = 0; i < modules.getLength(); i++) {
            Path pom = ROOT.resolve(modules.item(i).getTextContent().trim()).resolve("pom.xml");
            Element m = pom(pom);
            String packaging = text(m, "packaging");
            String id = text(m, "artifactId");
            // kvtransfer-fuzz holds only tests (the Jazzer targets): nothing depends on its jar.
            if ((packaging == null || packaging.equals("jar")) && !id.startsWith("kvtransfer-example-")
                    && !id.equals("kvtransfer-distribution") && !id.equals("kvtransfer-fuzz")) {
                jarModules.add(id);
            }
        }
        assertThat(jarModules).hasSizeGreaterThanOrEqualTo(10);
        assertThat(managed).containsExactlyInAnyOrderElementsOf(jarModules);
        assertThat(Files.readString(ROOT.resolve("plugin-parent/pom.xml"))).contains("<artifactId>kvtransfer-bom</artifactId>");
    }
}
