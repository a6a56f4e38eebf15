package dev.kvtransfer.cli;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * The prompt lengths of {@code kvtransfer route --isl}: {@code N} (all the same), {@code A,B,C} (each request one
 * of them, uniformly), or {@code uniform:MIN:MAX} (uniform over the range). Drawn from a seeded generator, so a run
 * is repeatable.
 */
final class IslSpec {
    private final List<Integer> choices;
    private final int min;
    private final int max;
    private final String text;

    private IslSpec(String text, List<Integer> choices, int min, int max) {
        this.text = text;
        this.choices = choices;
        this.min = min;
        this.max = max;
    }

    static IslSpec parse(String text) {
        try {
            if (text.startsWith("uniform:")) {
                String[] p = text.substring(8).split(":");
                int lo = Integer.parseInt(p[0]);
                int hi = Integer.parseInt(p[1]);
                if (p.length != 2 || lo < 1 || hi < lo) {
                    throw new NumberFormatException();
                }
                return new IslSpec(text, List.of(), lo, hi);
            }
            List<Integer> c = new ArrayList<>();
            for (String s : text.split(",")) {
                int v = Integer.parseInt(s.trim());
                if (v < 1) {
                    throw new NumberFormatException();
                }
                c.add(v);
            }
            return new IslSpec(text, List.copyOf(c), 0, 0);
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("--isl " + text + ": expected N, A,B,C or uniform:MIN:MAX (positive "
                    + "token counts)");
        }
    }

    int draw(SplittableRandom random) {
        if (choices.isEmpty()) {
            return min + random.nextInt(max - min + 1);
        }
        return choices.get(random.nextInt(choices.size()));
    }

    /** @return the longest prompt it can draw */
    int longest() {
        return choices.isEmpty() ? max : choices.stream().mapToInt(Integer::intValue).max().orElse(1);
    }

    @Override
    public String toString() {
        return text;
    }
}
