package io.sealsync.tsfile;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;

/**
 * Which series an IoTDB deletion's path pattern covers, by the rules of the release that wrote
 * it, as the loader's Python side applies them ({@code sealsync.formats.deletion}, whose
 * docstring says why each rule is so, and which release's {@code PartialPath} it follows).
 *
 * <p>{@link #RULES_012}: the pattern is a prefix of the series path, node by node, each {@code *}
 * or equal to the path's node as written (quotes kept; nodes split at dots outside double
 * quotes, as 0.12 splits them). {@link #RULES_013} and {@link #RULES_12}: a pattern matches a
 * series path node by node: {@code *} is any one node, {@code **} one or more, an unquoted node
 * holding {@code *} (0.13 to 1.1) or starting or ending with it (1.2 and later) a glob of names;
 * nodes split at dots outside backquotes or double quotes; a quoted node is a name (a doubled
 * backquote inside is one backquote), never a wildcard. A glob IoTDB would read as a regular
 * expression with other special characters is refused. A deletion's nodes arrive with its rules
 * first ({@link #WIRE_RULES}), except for {@link #RULES_12}. Both matchers answer the cases of
 * {@code tests/path_pattern_cases.json}; {@link #main} reads them for that test.
 */
public final class PathPattern {
  /** IoTDB 0.12: a prefix; {@code *} one node; names as written. */
  public static final String RULES_012 = "0.12";
  /** IoTDB 0.13 to 1.1: the whole path; a node holding {@code *} is a glob. */
  public static final String RULES_013 = "0.13";
  /** IoTDB 1.2 and later: the whole path; a glob where {@code *} starts or ends a node. */
  public static final String RULES_12 = "1.2";
  /** What starts a deletion's first node when its rules are not {@link #RULES_12}. */
  public static final String WIRE_RULES = "\u0000rules=";

  private static final String REGEX_SPECIAL = "\\^$.|?+()[]{}";

  private PathPattern() {}

  /**
   * The nodes of a path as IoTDB 0.12 splits one ({@code MetaUtils.splitPathToDetachedPath}): at
   * dots outside double quotes, each node as written.
   */
  public static String[] split012(String text) {
    List<String> nodes = new ArrayList<>();
    int start = 0;
    int n = text.length();
    for (int i = 0; i < n; i++) {
      char c = text.charAt(i);
      if (c == '.') {
        if (i == start) {
          throw new IllegalArgumentException("an empty node in " + text);
        }
        nodes.add(text.substring(start, i));
        start = i + 1;
      } else if (c == '"') {
        int end = text.indexOf('"', i + 1);
        while (end != -1 && text.charAt(end - 1) == '\\') {
          end = text.indexOf('"', end + 1);
        }
        if (end == -1 || (end != n - 1 && text.charAt(end + 1) != '.')) {
          throw new IllegalArgumentException("a double quote not closed before a dot in " + text);
        }
        nodes.add(text.substring(start, end + 1));
        if (end == n - 1) {
          return nodes.toArray(new String[0]);
        }
        i = end + 1;
        start = end + 2;
      } else if (c == '\'') {
        throw new IllegalArgumentException("a single quote in " + text);
      }
    }
    if (start >= n) {
      throw new IllegalArgumentException("an empty node in " + text);
    }
    nodes.add(text.substring(start));
    return nodes.toArray(new String[0]);
  }

  /** The nodes of a path or pattern as written (quotes kept). */
  public static String[] split(String text) {
    List<String> nodes = new ArrayList<>();
    int i = 0;
    int n = text.length();
    while (true) {
      String node;
      if (i < n && (text.charAt(i) == '`' || text.charAt(i) == '"')) {
        char quote = text.charAt(i);
        int j = i + 1;
        int k;
        while (true) {
          k = text.indexOf(quote, j);
          if (k < 0) {
            throw new IllegalArgumentException("unclosed " + quote + " in " + text);
          }
          if (quote == '`' && k + 1 < n && text.charAt(k + 1) == '`') {
            j = k + 2;
            continue;
          }
          break;
        }
        node = text.substring(i, k + 1);
        i = k + 1;
        if (i < n && text.charAt(i) != '.') {
          throw new IllegalArgumentException(node + " is followed by no dot in " + text);
        }
      } else {
        int k = text.indexOf('.', i);
        k = k < 0 ? n : k;
        node = text.substring(i, k);
        i = k;
      }
      if (node.isEmpty()) {
        throw new IllegalArgumentException("an empty node in " + text);
      }
      nodes.add(node);
      if (i >= n) {
        return nodes.toArray(new String[0]);
      }
      i++;
      if (i >= n) {
        throw new IllegalArgumentException("an empty node in " + text);
      }
    }
  }

  private static boolean quoted(String node) {
    return node.length() >= 2
        && node.charAt(0) == node.charAt(node.length() - 1)
        && (node.charAt(0) == '`' || node.charAt(0) == '"');
  }

  /** A node's name: without enclosing quotes, a doubled backquote one. */
  public static String name(String node) {
    if (node.length() >= 2 && node.startsWith("`") && node.endsWith("`")) {
      return node.substring(1, node.length() - 1).replace("``", "`");
    }
    if (node.length() >= 2 && node.startsWith("\"") && node.endsWith("\"")) {
      return node.substring(1, node.length() - 1);
    }
    return node;
  }

  /** Whether {@code node} (not {@code *} or {@code **}) is a glob of names under {@code rules}. */
  static boolean isGlob(String node, String rules) {
    if (rules.equals(RULES_012)
        || quoted(node)
        || node.indexOf('*') < 0
        || node.equals("*")
        || node.equals("**")) {
      return false;
    }
    return rules.equals(RULES_013) || node.startsWith("*") || node.endsWith("*");
  }

  private static boolean nodeMatches(String pattern, String name, String rules) {
    if (quoted(pattern)) {
      return name(pattern).equals(name);
    }
    if (pattern.equals("*") || pattern.equals("**")) {
      return true;
    }
    if (isGlob(pattern, rules)) {
      return globMatches(pattern, name);
    }
    return pattern.equals(name);
  }

  /**
   * Whether {@code name} matches the glob node {@code pattern} ({@code *}: any run of
   * characters), in time linear in their lengths. A regular expression backtracks ({@code
   * *a*a*a...*b} against a long run of {@code a} took hours); here the first part must start the
   * name, the last end it, and each one between is taken at its leftmost place after the one
   * before: if any placement fits, the leftmost ones do.
   */
  static boolean globMatches(String pattern, String name) {
    String[] parts = pattern.split("\\*", -1);
    String first = parts[0];
    String last = parts[parts.length - 1];
    if (first.length() + last.length() > name.length()
        || !name.startsWith(first)
        || !name.endsWith(last)) {
      return false;
    }
    int at = first.length();
    int end = name.length() - last.length();
    for (int p = 1; p < parts.length - 1; p++) {
      String part = parts[p];
      if (part.isEmpty()) {
        continue;
      }
      int found = find(name, part, at, end);
      if (found < 0) {
        return false;
      }
      at = found + part.length();
    }
    return true;
  }

  /**
   * Where {@code part} first occurs in {@code text} within {@code [from, end)}, or -1; in time
   * linear in their lengths (Knuth-Morris-Pratt: {@code String.indexOf} compares naively, quadratic
   * on a long name and a long part that almost matches everywhere).
   */
  static int find(String text, String part, int from, int end) {
    int m = part.length();
    int[] fail = new int[m];
    for (int i = 1, k = 0; i < m; i++) {
      while (k > 0 && part.charAt(i) != part.charAt(k)) {
        k = fail[k - 1];
      }
      if (part.charAt(i) == part.charAt(k)) {
        k++;
      }
      fail[i] = k;
    }
    for (int i = from, k = 0; i < end; i++) {
      while (k > 0 && text.charAt(i) != part.charAt(k)) {
        k = fail[k - 1];
      }
      if (text.charAt(i) == part.charAt(k)) {
        k++;
      }
      if (k == m) {
        return i - m + 1;
      }
    }
    return -1;
  }

  private static boolean whole(String[] pattern, String[] names, String rules) {
    BitSet reach = new BitSet();
    reach.set(0);
    for (String node : pattern) {
      BitSet next = new BitSet();
      if (node.equals("**")) {
        next.set(reach.nextSetBit(0) + 1, names.length + 1); // everything past the first
      } else {
        for (int j = reach.nextSetBit(0); j >= 0 && j < names.length; j = reach.nextSetBit(j + 1)) {
          if (nodeMatches(node, names[j], rules)) {
            next.set(j + 1);
          }
        }
      }
      if (next.isEmpty()) {
        return false;
      }
      reach = next;
    }
    return reach.get(names.length);
  }

  private static boolean prefix012(String[] pattern, String[] names) {
    if (pattern.length > names.length) {
      return false;
    }
    for (int i = 0; i < pattern.length; i++) {
      if (!pattern[i].equals("*") && !pattern[i].equals(names[i])) {
        return false;
      }
    }
    return true;
  }

  /** The node names of series {@code measurement} of {@code device} as {@code rules} compare. */
  static String[] seriesNames(String device, String measurement, String rules) {
    if (rules.equals(RULES_012)) {
      String[] nodes = split012(device);
      String[] out = Arrays.copyOf(nodes, nodes.length + 1);
      out[nodes.length] = measurement;
      return out;
    }
    String[] nodes = split(device);
    String[] out = new String[nodes.length + 1];
    for (int i = 0; i < nodes.length; i++) {
      out[i] = name(nodes[i]);
    }
    out[nodes.length] = name(measurement);
    return out;
  }

  /**
   * Whether a deletion whose nodes are {@code wire} (its rules first, {@link #WIRE_RULES}, unless
   * {@link #RULES_12}) covers series {@code measurement} of {@code device}.
   */
  public static boolean matches(String[] wire, String device, String measurement, String where)
      throws IOException {
    if (wire.length > 0 && wire[0].startsWith(WIRE_RULES)) {
      String rules = wire[0].substring(WIRE_RULES.length());
      if (!rules.equals(RULES_012) && !rules.equals(RULES_013)) {
        throw new IOException(where + ": a deletion read by unknown rules " + rules);
      }
      return matches(rules, Arrays.copyOfRange(wire, 1, wire.length), device, measurement, where);
    }
    return matches(RULES_12, wire, device, measurement, where);
  }

  /**
   * Whether {@code pattern} read by {@code rules} covers series {@code measurement} of {@code
   * device}; an IOException naming {@code where} for a series that does not split, or a glob
   * IoTDB reads as a regular expression with characters of its own.
   */
  public static boolean matches(
      String rules, String[] pattern, String device, String measurement, String where)
      throws IOException {
    String[] names;
    try {
      names = seriesNames(device, measurement, rules);
    } catch (IllegalArgumentException e) {
      throw new IOException("series " + device + "." + measurement + ": " + e.getMessage());
    }
    if (rules.equals(RULES_012)) {
      return prefix012(pattern, names);
    }
    for (String node : pattern) {
      if (isGlob(node, rules) && hasRegexSpecial(node)) {
        throw new IOException(
            where + ": pattern " + String.join(".", pattern) + ": IoTDB reads the node " + node
                + " as a regular expression; not applied (delete those points in IoTDB again"
                + " with a glob of letters, digits and *)");
      }
    }
    return whole(pattern, names, rules);
  }

  private static boolean hasRegexSpecial(String node) {
    for (int i = 0; i < node.length(); i++) {
      if (REGEX_SPECIAL.indexOf(node.charAt(i)) >= 0) {
        return true;
      }
    }
    return false;
  }

  /**
   * For the shared test: lines {@code rules TAB pattern TAB device TAB measurement} on stdin, one
   * answer a line on stdout ({@code true}, {@code false} or {@code refuse}).
   */
  public static void main(String[] args) throws IOException {
    answerEach(
        line -> {
          String[] f = line.split("\t", -1);
          try {
            String[] nodes = f[0].equals(RULES_012) ? split012(f[1]) : split(f[1]);
            return String.valueOf(matches(f[0], nodes, f[2], f[3], "here"));
          } catch (IOException e) {
            return "refuse";
          }
        });
  }

  /** For the shared tests' mains: each line of stdin answered by one line on stdout. */
  static void answerEach(java.util.function.UnaryOperator<String> answer) throws IOException {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    StringBuilder out = new StringBuilder();
    String line;
    while ((line = in.readLine()) != null) {
      out.append(answer.apply(line)).append('\n');
    }
    System.out.print(out);
    System.out.flush();
  }
}
