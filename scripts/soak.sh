#!/usr/bin/env bash
# Runs the soak (soak/README.md) from the soak module's build output; builds nothing. Build first, once:
#   mvn -B -ntp package -DskipTests -pl soak -am     (or any `mvn package` / `mvn verify` of the project)
# then e.g.:  scripts/soak.sh --backend=aeron --duration=30m --out=target/soak-aeron
set -euo pipefail
cd "$(dirname "$0")/.."
cp_file=soak/target/soak.classpath
if [[ ! -f "$cp_file" || ! -d soak/target/classes ]]; then
  echo "soak.sh: $cp_file or soak/target/classes missing: build first (mvn -B -ntp package -DskipTests -pl soak -am)" >&2
  exit 2
fi
flags=(--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
  --add-exports=java.base/jdk.internal.ref=ALL-UNNAMED --add-exports=java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED --add-exports=java.base/jdk.internal.misc=ALL-UNNAMED
  -Dchronicle.analytics.disable=true)
exec java "${flags[@]}" -Xmx512m -cp "soak/target/classes:$(cat "$cp_file")" dev.kvtransfer.soak.SoakMain "$@"
