package outbox.peers;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** Command-line options of the form {@code --name value}; a name may repeat. */
final class Args {
    private final Map<String, List<String>> values = new HashMap<>();

    static Args parse(String[] argv, int from) {
        Args a = new Args();
        for (int i = from; i < argv.length; i++) {
            String name = argv[i];
            if (!name.startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value, got " + name);
            }
            a.values.computeIfAbsent(name.substring(2), k -> new ArrayList<>()).add(argv[++i]);
        }
        return a;
    }

    String get(String name) {
        List<String> v = values.get(name);
        if (v == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return v.get(v.size() - 1);
    }

    String get(String name, String fallback) {
        List<String> v = values.get(name);
        return v == null ? fallback : v.get(v.size() - 1);
    }

    long getLong(String name, long fallback) {
        return Long.parseLong(get(name, Long.toString(fallback)));
    }

    double getDouble(String name, double fallback) {
        return Double.parseDouble(get(name, Double.toString(fallback)));
    }

    List<String> all(String name) {
        return values.getOrDefault(name, List.of());
    }
}
