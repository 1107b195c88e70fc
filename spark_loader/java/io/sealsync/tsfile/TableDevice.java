package io.sealsync.tsfile;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * A table-model device as one string, as {@code sealsync.formats.table_device} names it: the
 * table and its tag values joined by dots, a NULL tag as {@code null}, and backquoted (a
 * backquote inside doubled) a segment that holds a dot or a backquote, starts with a double
 * quote, is empty or is the text {@code null}, and a table named {@code root}. The library's
 * {@code IDeviceID.toString} names ('a.b','c') and ('a','b.c') alike, and a NULL tag as the
 * string 'null'; this keeps them apart. Both are held to {@code tests/table_device_cases.json}.
 */
public final class TableDevice {
  private TableDevice() {}

  private static boolean needsQuotes(String segment, boolean first) {
    return segment.isEmpty()
        || segment.equals("null")
        || segment.indexOf('.') >= 0
        || segment.indexOf('`') >= 0
        || segment.startsWith("\"")
        || (first && segment.equals("root"));
  }

  /** The device of a table ({@code segments[0]}) and its tag values (null for NULL). */
  public static String name(String[] segments) {
    int end = segments.length;
    while (end > 0 && segments[end - 1] == null) {
      end--;
    }
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < end; i++) {
      if (i > 0) {
        out.append('.');
      }
      String s = segments[i];
      if (s == null) {
        out.append("null");
      } else if (needsQuotes(s, i == 0)) {
        out.append('`').append(s.replace("`", "``")).append('`');
      } else {
        out.append(s);
      }
    }
    return out.toString();
  }

  /**
   * For the shared test: lines of segments on stdin, tab-separated, a segment {@code \0} for
   * NULL; each one's name a line on stdout.
   */
  public static void main(String[] args) throws IOException {
    PathPattern.answerEach(
        line -> {
          List<String> parts = new ArrayList<>();
          for (String f : line.split("\t", -1)) {
            parts.add(f.equals("\u0000") ? null : f);
          }
          return name(parts.toArray(new String[0]));
        });
  }
}
