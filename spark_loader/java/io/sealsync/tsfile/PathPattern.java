package io.sealsync.tsfile;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;

/**
 * Which series an IoTDB deletion's path pattern covers: the rules of IoTDB 0.13 and later
 * ({@code PartialPath.matchFullPath}, {@code PathPatternUtil}), as the loader's Python side
 * applies them ({@code sealsync.formats.deletion}, whose docstring says why each rule is so).
 *
 * <p>A pattern matches a series path node by node: {@code *} is any one node, {@code **} one or
 * more, a node starting or ending with {@code *} a glob of names. Nodes split at dots outside
 * backquotes or double quotes; a quoted node is a name (a doubled backquote inside is one
 * backquote), never a wildcard. Where IoTDB 0.12, which read a pattern as a prefix, would delete
 * from a series that later releases keep, the file is refused. Both matchers answer the cases of
 * {@code tests/path_pattern_cases.json}; {@link #main} reads them for that test.
 */
public final class PathPattern {
  private PathPattern() {}

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

  private static boolean nodeMatches(String pattern, String name) {
    if (quoted(pattern)) {
      return name(pattern).equals(name);
    }
    if (pattern.equals("*") || pattern.equals("**")) {
      return true;
    }
    if (pattern.startsWith("*") || pattern.endsWith("*")) {
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

  private static boolean whole(String[] pattern, String[] names) {
    BitSet reach = new BitSet();
    reach.set(0);
    for (String node : pattern) {
      BitSet next = new BitSet();
      if (node.equals("**")) {
        next.set(reach.nextSetBit(0) + 1, names.length + 1); // everything past the first
      } else {
        for (int j = reach.nextSetBit(0); j >= 0 && j < names.length; j = reach.nextSetBit(j + 1)) {
          if (nodeMatches(node, names[j])) {
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

  private static boolean onlyAsPrefix(String[] pattern, String[] names) {
    if (pattern.length >= names.length) {
      return false;
    }
    for (int i = 0; i < pattern.length; i++) {
      if (pattern[i].equals("**") || !nodeMatches(pattern[i], names[i])) {
        return false;
      }
    }
    return true;
  }

  /** The node names of series {@code measurement} of {@code device}. */
  static String[] seriesNames(String device, String measurement) {
    String[] nodes = split(device);
    String[] out = new String[nodes.length + 1];
    for (int i = 0; i < nodes.length; i++) {
      out[i] = name(nodes[i]);
    }
    out[nodes.length] = name(measurement);
    return out;
  }

  /**
   * Whether {@code pattern} covers series {@code measurement} of {@code device}; an IOException
   * naming {@code where} where IoTDB 0.12 and later releases disagree.
   */
  public static boolean matches(String[] pattern, String device, String measurement, String where)
      throws IOException {
    String[] names;
    try {
      names = seriesNames(device, measurement);
    } catch (IllegalArgumentException e) {
      throw new IOException("series " + device + "." + measurement + ": " + e.getMessage());
    }
    for (String node : pattern) {
      if (node.equals("**")) {
        return whole(pattern, names);
      }
    }
    if (onlyAsPrefix(pattern, names)) {
      throw new IOException(
          where + ": pattern " + String.join(".", pattern) + " covers " + device + "."
              + measurement + " in IoTDB 0.12 (a prefix) but not in 0.13 and later (a whole "
              + "path); not applied (delete those points in IoTDB again with a whole-path "
              + "pattern, e.g. ending in .**)");
    }
    return whole(pattern, names);
  }

  /**
   * For the shared test: lines {@code pattern TAB device TAB measurement} on stdin, one answer a
   * line on stdout ({@code true}, {@code false} or {@code refuse}).
   */
  public static void main(String[] args) throws IOException {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    StringBuilder out = new StringBuilder();
    String line;
    while ((line = in.readLine()) != null) {
      String[] f = line.split("\t", -1);
      String answer;
      try {
        answer = String.valueOf(matches(split(f[0]), f[1], f[2], "here"));
      } catch (IOException e) {
        answer = "refuse";
      }
      out.append(answer).append('\n');
    }
    System.out.print(out);
    System.out.flush();
  }
}
