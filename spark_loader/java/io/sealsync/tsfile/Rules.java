package io.sealsync.tsfile;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;

/**
 * Which chunks this reader decodes exactly: the table of {@code
 * sealsync.formats.tsfile_support}, the one the receiver checks every chunk header against,
 * handed over as its text ({@code java_table()}) so that both give one answer. A line per
 * (format version, data type, encoding) code triple, {@code "v t e"}, with a tab and the
 * reason where such a chunk is refused ({@code {series}} for the series' name); a line {@code
 * "encrypted"} with the reason an encrypted file is refused ({@code {level}}).
 */
public final class Rules implements java.io.Serializable {
  private static final long serialVersionUID = 1L;
  private static final String NONE = "";

  private final Map<String, String> chunks = new HashMap<>();
  private String encrypted = "encrypted (encryptLevel {level})";

  public Rules(String table) {
    for (String line : table.split("\n")) {
      int tab = line.indexOf('\t');
      String key = tab < 0 ? line : line.substring(0, tab);
      String reason = tab < 0 ? NONE : line.substring(tab + 1);
      if (key.equals("encrypted")) {
        encrypted = reason;
      } else if (!key.isEmpty()) {
        chunks.put(key, reason);
      }
    }
  }

  /** A chunk of {@code series}, refused with the table's reason unless it is read exactly. */
  void chunk(int version, int dataType, int encoding, String series) throws IOException {
    String reason = chunks.get(version + " " + dataType + " " + encoding);
    if (reason == null) {
      throw new IOException(
          "TsFile series " + quoted(series) + ": data type code " + dataType + " with encoding"
              + " code " + encoding + " is not in format " + version + "; the loader cannot"
              + " read it");
    }
    if (!reason.isEmpty()) {
      throw new IOException(
          "TsFile " + reason.replace("{series}", quoted(series)) + "; the loader cannot read it");
    }
  }

  /** A file whose metadata says its pages are encrypted is refused. */
  void file(Map<String, String> properties) throws IOException {
    String level = properties == null ? null : properties.get("encryptLevel");
    if (level != null && !level.isEmpty() && !level.equals("0")) {
      throw new IOException(
          "TsFile " + encrypted.replace("{level}", level) + "; the loader cannot read it");
    }
  }

  /** As Python's repr quotes a plain name (the receiver's line names it so). */
  static String quoted(String name) {
    StringBuilder out = new StringBuilder("'");
    for (int i = 0; i < name.length(); i++) {
      char c = name.charAt(i);
      if (c == '\\' || c == '\'') {
        out.append('\\').append(c);
      } else if (Character.isISOControl(c)) {
        out.append(String.format("\\x%02x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('\'').toString();
  }
}
