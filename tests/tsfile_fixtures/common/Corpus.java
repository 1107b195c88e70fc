import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The cases of the corpus, shared by the three generators. It knows no TsFile class: each
 * generator supplies a {@link Lib} that writes and reads with its own library, and this class
 * decides what goes in each file, writes the Java reader's answer beside it, checks it against
 * what was written and keeps the manifest. Types, encodings and compressors are named as
 * strings, so one list of cases serves every library version.
 *
 * <p>Values travel as plain Java objects: Boolean, Integer, Long (INT64 and TIMESTAMP), Float,
 * Double, String (TEXT and STRING, written as UTF-8), byte[] (BLOB) and LocalDate (DATE); null
 * is a null in an aligned row.
 */
final class Corpus {

  /** One column of a device: measurement name, type, encoding, compressor. */
  static final class Col {
    final String name;
    final String type;
    final String encoding;
    final String compressor;

    Col(String name, String type, String encoding, String compressor) {
      this.name = name;
      this.type = type;
      this.encoding = encoding;
      this.compressor = compressor;
    }
  }

  /** What a generator's library can do; every method may throw what the library throws. */
  interface Lib {
    String line();

    String library();

    List<String> types();

    List<String> encodings();

    List<String> compressors();

    String defaultEncoding(String type);

    /** The encodings IoTDB's server lets a series of the type have (null: not known). */
    List<String> iotdbEncodings(String type);

    boolean hasTableModel();

    /** Sets the page limits the next writer uses (points per page, bytes per page). */
    void configure(int maxPointsInPage, int pageSizeInByte);

    /** Puts back the library's own limits. */
    void configureDefaults();

    W open(File file) throws Exception;

    /** Reads every chunk of every series of the file in file order and hands out each point. */
    void readBack(File file, Sink sink) throws Exception;
  }

  /** An open writer of one file. */
  interface W {
    void register(String device, List<Col> cols, boolean aligned) throws Exception;

    /** Writes one row; values[i] belongs to cols[i], null = no value at that time. */
    void write(String device, boolean aligned, List<Col> cols, long[] times, Object[][] rows)
        throws Exception;

    void registerTable(String table, List<String> tags, List<Col> fields) throws Exception;

    /** rows[r] = tag values (String or null) followed by field values. */
    void writeTable(String table, List<String> tags, List<Col> fields, long[] times,
        Object[][] rows) throws Exception;

    /**
     * Writes one chunk group of rows straight through the file's I/O writer with the chunk
     * writers, as IoTDB's memtable flush does, so times already written can be written again
     * (the high-level writer refuses data older than what it wrote). Only between flushes.
     */
    void writeRaw(String device, boolean aligned, List<Col> cols, long[] times, Object[][] rows)
        throws Exception;

    /** writeRaw for a table device: rows[r] are field values only; tagValues name the device. */
    void writeRawTable(String table, List<String> tagValues, List<Col> fields, long[] times,
        Object[][] rows) throws Exception;

    void flush() throws Exception;

    /**
     * Writes the operation-index-range marker with the two plan indices, as IoTDB's memtable
     * flush does after each flush (``TsFileIOWriter.writePlanIndices``). Only between flushes.
     */
    void planIndices(long min, long max) throws Exception;

    void close() throws Exception;
  }

  /** Receives the points the Java reader reads. */
  interface Sink {
    /**
     * segments is null for format v3 (a device is a plain string there); value is null for
     * a null in an aligned row (it is not recorded).
     */
    void point(String device, List<String> segments, String measurement, String type, long time,
        Object value, long chunkOffset, boolean aligned);

    /** After a chunk's points (aligned: the time chunk, measurement ""): its page count. */
    default void chunk(String device, String measurement, int pages, boolean onePageHeader) {}
  }

  // ---------------------------------------------------------------- JSON

  static String q(String s) {
    StringBuilder b = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20 || Character.isSurrogate(c) && !validSurrogate(s, i)) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  private static boolean validSurrogate(String s, int i) {
    char c = s.charAt(i);
    if (Character.isHighSurrogate(c)) {
      return i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1));
    }
    return i > 0 && Character.isHighSurrogate(s.charAt(i - 1));
  }

  static String hex(byte[] b) {
    StringBuilder s = new StringBuilder(b.length * 2);
    for (byte x : b) {
      s.append(String.format("%02x", x & 0xff));
    }
    return s.toString();
  }

  static String dbl(double d) {
    if (Double.isNaN(d)) {
      return "\"NaN\"";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    }
    return Double.toString(d);
  }

  /** The documented JSON form of one value of the given type. */
  static String json(String type, Object v) {
    if (v == null) {
      return "null";
    }
    switch (type) {
      case "BOOLEAN":
        return ((Boolean) v) ? "true" : "false";
      case "INT32":
        return Integer.toString((Integer) v);
      case "INT64":
      case "TIMESTAMP":
        return Long.toString((Long) v);
      case "FLOAT":
        return dbl((double) (Float) v);
      case "DOUBLE":
        return dbl((Double) v);
      case "DATE":
        LocalDate d = (LocalDate) v;
        return String.format("\"%04d-%02d-%02d\"", d.getYear(), d.getMonthValue(),
            d.getDayOfMonth());
      case "TEXT":
      case "STRING":
      case "BLOB":
        byte[] b = v instanceof byte[] ? (byte[]) v : ((String) v).getBytes(StandardCharsets.UTF_8);
        return q(hex(b));
      default:
        throw new IllegalArgumentException("no JSON form for type " + type);
    }
  }

  /** DATE as TsFile stores it: the int yyyyMMdd. */
  static int dateInt(LocalDate d) {
    return d.getYear() * 10000 + d.getMonthValue() * 100 + d.getDayOfMonth();
  }

  static LocalDate intDate(int v) {
    return LocalDate.of(v / 10000, v / 100 % 100, v % 100);
  }

  static String list(List<String> items) {
    return "[" + String.join(", ", items) + "]";
  }

  static String strList(List<String> items) {
    List<String> out = new ArrayList<>();
    for (String s : items) {
      out.add(s == null ? "null" : q(s));
    }
    return list(out);
  }

  static String err(Throwable t) {
    Throwable root = t;
    String msg = t.getClass().getName() + ": " + t.getMessage();
    while (root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
      msg += " (caused by " + root.getClass().getName() + ": " + root.getMessage() + ")";
    }
    return msg.replace('\n', ' ');
  }

  // ---------------------------------------------------------------- values

  static final long BASE_TIME = 1_700_000_000_000L;

  /** An ordinary value of the type for row i: varied, never special. */
  static Object plain(String type, int i) {
    switch (type) {
      case "BOOLEAN":
        return i % 3 == 0;
      case "INT32":
        return (i * 7919) % 100_003 - 50_000;
      case "INT64":
        return (long) i * 1_000_003L - 40_000_000L;
      case "TIMESTAMP":
        return BASE_TIME + i * 1000L;
      case "FLOAT":
        return i * 0.25f - 3.5f;
      case "DOUBLE":
        return i * 1.1 - 7.0;
      case "TEXT":
      case "STRING":
        return "v" + i + (i % 5 == 0 ? "-température" : "");
      case "BLOB":
        return new byte[] {(byte) i, 0, (byte) 0xff, (byte) (i >> 8)};
      case "DATE":
        return LocalDate.of(2024, 1, 1).plusDays(i);
      default:
        throw new IllegalArgumentException(type);
    }
  }

  /** The edge values of the type. */
  static List<Object> specials(String type) {
    switch (type) {
      case "BOOLEAN":
        return Arrays.asList(true, false);
      case "INT32":
        return Arrays.asList(Integer.MIN_VALUE, Integer.MAX_VALUE, 0, -1);
      case "INT64":
        return Arrays.asList(Long.MIN_VALUE, Long.MAX_VALUE, (1L << 53) + 1, -(1L << 53) - 1,
            0L, -1L);
      case "TIMESTAMP":
        return Arrays.asList(0L, -1L, Long.MAX_VALUE, (1L << 53) + 1);
      case "FLOAT":
        return Arrays.asList(Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, -0.0f,
            Float.MIN_VALUE, Float.MAX_VALUE, 0.1f);
      case "DOUBLE":
        return Arrays.asList(Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY,
            -0.0, Double.MIN_VALUE, Double.MAX_VALUE, 0.1);
      case "TEXT":
      case "STRING":
        return Arrays.asList("", "a\u0000b", "温度°C", "quote\"back\\slash", "line\nbreak\ttab",
            "😀");
      case "BLOB":
        return Arrays.asList(new byte[0], new byte[] {0}, new byte[] {0, 0, 1, (byte) 0x80},
            "温度\u0000".getBytes(StandardCharsets.UTF_8));
      case "DATE":
        return Arrays.asList(LocalDate.of(1970, 1, 1), LocalDate.of(2024, 2, 29),
            LocalDate.of(9999, 12, 31), LocalDate.of(1000, 1, 1));
      default:
        throw new IllegalArgumentException(type);
    }
  }

  /** n values of the type, the edge values first when withSpecials. */
  static Object[] series(String type, int n, boolean withSpecials) {
    Object[] out = new Object[n];
    List<Object> sp = withSpecials ? specials(type) : Collections.emptyList();
    for (int i = 0; i < n; i++) {
      out[i] = i < sp.size() ? sp.get(i) : plain(type, i);
    }
    return out;
  }

  // ---------------------------------------------------------------- one file

  final Lib lib;
  final File root;
  final List<String> manifest = new ArrayList<>();
  final List<String> refused = new ArrayList<>();
  final Map<String, List<String>> accepted = new LinkedHashMap<>();
  final List<String> acceptedCompressors = new ArrayList<>();
  int fileIndex = 0;

  Corpus(Lib lib, File root) {
    this.lib = lib;
    this.root = root;
  }

  /** One file being written: what was written, for the check against what is read. */
  final class FileCase {
    final String name;
    final String model;
    final List<String> covers;
    final File file;
    final List<String> written = new ArrayList<>();
    final Map<String, String> extra = new LinkedHashMap<>();
    W w;
    /** Whether each flush ends with a plan-index marker, as in the files IoTDB writes. */
    boolean planIndices;
    boolean dirty;
    long nextPlan = 1;

    void iotdbFlushes() {
      planIndices = true;
      extra.put("plan_indices", "true");
    }

    /** Ends a chunk group per device, like one memtable flush. */
    void flush() throws Exception {
      w.flush();
      dirty = false;
      marker();
    }

    private void marker() throws Exception {
      if (planIndices) {
        w.planIndices(nextPlan, nextPlan + 99);
        nextPlan += 100;
      }
    }

    FileCase(String name, String model, List<String> covers, File file) {
      this.name = name;
      this.model = model;
      this.covers = covers;
      this.file = file;
    }

    void register(String device, List<Col> cols, boolean aligned) throws Exception {
      w.register(device, cols, aligned);
    }

    /** Writes rows[r][c] of cols at times[r] and remembers every non-null value. */
    void write(String device, boolean aligned, List<Col> cols, long[] times, Object[][] rows)
        throws Exception {
      w.write(device, aligned, cols, times, rows);
      dirty = true;
      remember(cols, times, rows, 0);
    }

    void writeTable(String table, List<String> tags, List<Col> fields, long[] times,
        Object[][] rows) throws Exception {
      w.writeTable(table, tags, fields, times, rows);
      dirty = true;
      remember(fields, times, rows, tags.size());
    }

    void writeRaw(String device, boolean aligned, List<Col> cols, long[] times, Object[][] rows)
        throws Exception {
      w.writeRaw(device, aligned, cols, times, rows);
      marker();
      remember(cols, times, rows, 0);
    }

    void writeRawTable(String table, List<String> tagValues, List<Col> fields, long[] times,
        Object[][] rows) throws Exception {
      w.writeRawTable(table, tagValues, fields, times, rows);
      marker();
      remember(fields, times, rows, 0);
    }

    private void remember(List<Col> cols, long[] times, Object[][] rows, int skip) {
      for (int r = 0; r < times.length; r++) {
        for (int c = 0; c < cols.size(); c++) {
          Object v = rows[r][c + skip];
          if (v != null) {
            Col col = cols.get(c);
            written.add(col.name + "\u0000" + times[r] + "\u0000" + json(col.type, v));
          }
        }
      }
    }
  }

  File caseFile(String name) {
    fileIndex++;
    // IoTDB's own name: <time>-<version>-<inner compaction count>-<cross compaction count>
    String fname = (BASE_TIME + fileIndex) + "-" + fileIndex + "-" + (fileIndex % 3) + "-"
        + (fileIndex % 2) + ".tsfile";
    File dir = new File(root, name);
    dir.mkdirs();
    return new File(dir, fname);
  }

  FileCase begin(String name, String model, String... covers) throws Exception {
    FileCase fc = new FileCase(name, model, Arrays.asList(covers), caseFile(name));
    fc.w = lib.open(fc.file);
    return fc;
  }

  /** Closes the file, reads it back with the Java reader, writes the answer and the entry. */
  void end(FileCase fc) throws Exception {
    if (fc.planIndices && fc.dirty) {
      fc.flush();
    }
    fc.w.close();
    File expected = new File(fc.file.getPath() + ".expected.jsonl");
    List<String> read = new ArrayList<>();
    int[] count = {0};
    java.util.Set<String> devices = new java.util.TreeSet<>();
    try (Writer out = Files.newBufferedWriter(expected.toPath(), StandardCharsets.UTF_8)) {
      int[] chunks = {0, 0, 0};
      lib.readBack(fc.file, new Sink() {
        @Override
        public void point(String device, List<String> segments, String m, String type, long t,
            Object v, long chunk, boolean aligned) {
          if (v == null) {
            return;
          }
          devices.add(device);
          String js = json(type, v);
          read.add(m + "\u0000" + t + "\u0000" + js);
          count[0]++;
          try {
            out.write("{\"device\": " + q(device)
                + (segments == null ? "" : ", \"segments\": " + strList(segments))
                + ", \"measurement\": " + q(m) + ", \"type\": " + q(type) + ", \"time\": " + t
                + ", \"value\": " + js + ", \"chunk\": " + chunk + ", \"aligned\": " + aligned
                + "}\n");
          } catch (IOException e) {
            throw new RuntimeException(e);
          }
        }

        @Override
        public void chunk(String device, String measurement, int pages, boolean onePage) {
          chunks[0]++;
          chunks[1] += onePage ? 1 : 0;
          chunks[2] = Math.max(chunks[2], pages);
        }
      });
      fc.extra.put("chunks", Integer.toString(chunks[0]));
      fc.extra.put("one_page_chunks", Integer.toString(chunks[1]));
      fc.extra.put("max_pages_per_chunk", Integer.toString(chunks[2]));
    }
    List<String> a = new ArrayList<>(fc.written);
    List<String> b = new ArrayList<>(read);
    Collections.sort(a);
    Collections.sort(b);
    boolean same = a.equals(b);
    // Which series read back other than written (a lossy encoding, an encoder's bug): the
    // Java reader's answer stays the expected one, this only says where it differs.
    Map<String, List<String>> wa = new java.util.TreeMap<>();
    Map<String, List<String>> ra = new java.util.TreeMap<>();
    for (String x : a) {
      wa.computeIfAbsent(x.substring(0, x.indexOf('\u0000')), k -> new ArrayList<>()).add(x);
    }
    for (String x : b) {
      ra.computeIfAbsent(x.substring(0, x.indexOf('\u0000')), k -> new ArrayList<>()).add(x);
    }
    java.util.Set<String> keys = new java.util.TreeSet<>(wa.keySet());
    keys.addAll(ra.keySet());
    List<String> differ = new ArrayList<>();
    for (String k : keys) {
      List<String> x = wa.getOrDefault(k, Collections.emptyList());
      List<String> y = ra.getOrDefault(k, Collections.emptyList());
      if (!x.equals(y)) {
        String ex = "";
        for (int i = 0; i < Math.min(x.size(), y.size()); i++) {
          if (!x.get(i).equals(y.get(i))) {
            ex = "wrote " + x.get(i).substring(k.length() + 1).replace('\u0000', '=') + ", read "
                + y.get(i).substring(k.length() + 1).replace('\u0000', '=');
            break;
          }
        }
        differ.add("{\"measurement\": " + q(k) + ", \"written\": " + x.size() + ", \"read\": "
            + y.size() + ", \"first_difference\": " + q(ex) + "}");
      }
    }
    String rel = root.toPath().getParent().relativize(fc.file.toPath()).toString();
    StringBuilder e = new StringBuilder();
    e.append("{\"file\": ").append(q(rel));
    e.append(", \"expected\": ").append(q(rel + ".expected.jsonl"));
    e.append(", \"case\": ").append(q(fc.name));
    e.append(", \"line\": ").append(q(lib.line()));
    e.append(", \"library\": ").append(q(lib.library()));
    e.append(", \"format_version\": ").append(versionByte(fc.file));
    e.append(", \"model\": ").append(q(fc.model));
    e.append(", \"covers\": ").append(strList(fc.covers));
    e.append(", \"devices\": ").append(strList(new ArrayList<>(devices)));
    e.append(", \"points\": ").append(count[0]);
    e.append(", \"written_points\": ").append(fc.written.size());
    e.append(", \"reads_as_written\": ").append(same);
    e.append(", \"differs_from_written\": ").append(list(differ));
    for (Map.Entry<String, String> x : fc.extra.entrySet()) {
      e.append(", ").append(q(x.getKey())).append(": ").append(x.getValue());
    }
    e.append("}");
    manifest.add(e.toString());
  }

  static int versionByte(File f) throws IOException {
    try (RandomAccessFile r = new RandomAccessFile(f, "r")) {
      if (r.length() < 7) {
        return -1;
      }
      r.seek(6);
      return r.read();
    }
  }

  void refuse(String what, String stage, Throwable t) {
    refused.add("{\"what\": " + q(what) + ", \"stage\": " + q(stage) + ", \"error\": "
        + q(err(t)) + "}");
  }

  // ---------------------------------------------------------------- probes

  /**
   * Writes one series of the type with the encoding and compressor into a scratch file and
   * reads it back. Returns null when it worked, else the stage and the exception.
   */
  Object[] probe(String type, String encoding, String compressor, boolean withSpecials) {
    File dir = new File(root.getParentFile(), ".probe-" + lib.line());
    dir.mkdirs();
    File f = new File(dir, "p.tsfile");
    f.delete();
    String stage = "open";
    try {
      lib.configure(64, 65536);
      W w = lib.open(f);
      try {
        List<Col> cols = Collections.singletonList(new Col("s", type, encoding, compressor));
        stage = "register";
        w.register("root.probe.d", cols, false);
        stage = "write";
        int n = 200;
        Object[] vals = series(type, n, withSpecials);
        long[] times = new long[n];
        Object[][] rows = new Object[n][];
        for (int i = 0; i < n; i++) {
          times[i] = i;
          rows[i] = new Object[] {vals[i]};
        }
        w.write("root.probe.d", false, cols, times, rows);
        stage = "close";
      } finally {
        w.close();
      }
      stage = "read";
      int[] n = {0};
      lib.readBack(f, (d, s, m, ty, t, v, c, al) -> n[0]++);
      if (n[0] != 200) {
        throw new IllegalStateException("read " + n[0] + " points of 200");
      }
      return null;
    } catch (Throwable t) {
      return new Object[] {stage, t};
    } finally {
      f.delete();
      dir.delete();
    }
  }

  // ---------------------------------------------------------------- cases

  static long[] times(long from, int n, long step) {
    long[] t = new long[n];
    for (int i = 0; i < n; i++) {
      t[i] = from + i * step;
    }
    return t;
  }

  /** Rows of the columns' series values; nullEvery > 0 puts a null where (r + c) % it == 0. */
  static Object[][] rows(List<Col> cols, int n, int offset, boolean withSpecials, int nullEvery) {
    Object[][] rows = new Object[n][cols.size()];
    for (int c = 0; c < cols.size(); c++) {
      Object[] vals = series(cols.get(c).type, n + offset, withSpecials);
      for (int r = 0; r < n; r++) {
        boolean isNull = nullEvery > 0 && (r + c) % nullEvery == 0;
        rows[r][c] = isNull ? null : vals[r + offset];
      }
    }
    return rows;
  }

  List<Col> allTypes(String prefix, String compressor) {
    List<Col> cols = new ArrayList<>();
    for (String t : lib.types()) {
      cols.add(new Col(prefix + t.toLowerCase(), t, lib.defaultEncoding(t), compressor));
    }
    return cols;
  }

  void run() throws Exception {
    String defaultComp = "SNAPPY";
    // Which encoding each type accepts: a scratch file per pair, edge values first.
    for (String type : lib.types()) {
      List<String> ok = new ArrayList<>();
      for (String enc : lib.encodings()) {
        Object[] bad = probe(type, enc, defaultComp, true);
        if (bad == null) {
          ok.add(enc);
          continue;
        }
        Object[] badPlain = probe(type, enc, defaultComp, false);
        if (badPlain == null) {
          refuse(type + " " + enc + " (edge values)", (String) bad[0], (Throwable) bad[1]);
          ok.add(enc + "/plain");
        } else {
          refuse(type + " " + enc, (String) badPlain[0], (Throwable) badPlain[1]);
        }
      }
      accepted.put(type, ok);
    }
    for (String comp : lib.compressors()) {
      Object[] bad = probe("INT64", "PLAIN", comp, true);
      if (bad == null) {
        acceptedCompressors.add(comp);
      } else {
        refuse("compressor " + comp, (String) bad[0], (Throwable) bad[1]);
      }
    }

    // enc-<TYPE>: one series per accepted encoding that IoTDB lets a series have, several
    // pages each; enc-library-only-<TYPE>: those the library writes but IoTDB never does.
    for (String type : lib.types()) {
      List<String> iotdb = lib.iotdbEncodings(type);
      List<String> usual = new ArrayList<>();
      List<String> unusual = new ArrayList<>();
      for (String e : accepted.get(type)) {
        String enc = e.endsWith("/plain") ? e.substring(0, e.length() - 6) : e;
        (iotdb == null || iotdb.contains(enc) ? usual : unusual).add(e);
      }
      encodingFile("enc-" + type, type, usual, defaultComp, true);
      if (!unusual.isEmpty()) {
        encodingFile("enc-library-only-" + type, type, unusual, defaultComp, false);
      }
    }

    // comp-<COMPRESSOR>: every type with its default encoding.
    for (String comp : acceptedCompressors) {
      lib.configure(16, 65536);
      FileCase fc = begin("comp-" + comp, "tree", "compressor " + comp, "every type");
      List<Col> cols = allTypes("s_", comp);
      fc.register("root.sg.comp", cols, false);
      fc.register("root.sg.comp_al", cols, true);
      fc.write("root.sg.comp", false, cols, times(BASE_TIME, 50, 10), rows(cols, 50, 0, true, 0));
      fc.write("root.sg.comp_al", true, cols, times(BASE_TIME, 50, 10),
          rows(cols, 50, 0, true, 5));
      end(fc);
    }

    // aligned: vector devices with nulls, a row of nulls only, three chunk groups, many pages,
    // beside a non-aligned device.
    {
      lib.configure(16, 65536);
      FileCase fc = begin("aligned", "tree", "aligned device", "nulls", "all-null row",
          "several chunk groups", "many pages", "every type", "mixed with non-aligned");
      fc.iotdbFlushes();
      List<Col> cols = allTypes("a_", defaultComp);
      List<Col> plainCols = allTypes("p_", defaultComp);
      fc.register("root.sg.al1", cols, true);
      fc.register("root.sg.al2", cols, true);
      fc.register("root.sg.plain", plainCols, false);
      for (int g = 0; g < 3; g++) {
        int n = 40;
        Object[][] r = rows(cols, n, g * n, g == 0, 3);
        if (g == 1) {
          Arrays.fill(r[7], null);
        }
        fc.write("root.sg.al1", true, cols, times(BASE_TIME + g * n * 100L, n, 100), r);
        fc.write("root.sg.al2", true, cols, times(BASE_TIME + g * 7L, 5, 1),
            rows(cols, 5, g, false, 2));
        fc.write("root.sg.plain", false, plainCols, times(BASE_TIME + g * n * 100L, n, 100),
            rows(plainCols, n, g * n, false, 0));
        fc.flush();
      }
      end(fc);
    }

    // aligned-sparse: an aligned column with no value in a whole chunk group, and one only
    // ever null, beside a column that always has a value.
    {
      lib.configure(10000, 65536);
      FileCase fc = begin("aligned-sparse", "tree", "aligned device",
          "column null in a whole chunk group", "column always null");
      fc.iotdbFlushes();
      List<Col> cols = Arrays.asList(new Col("a", "INT64", "TS_2DIFF", defaultComp),
          new Col("b", "DOUBLE", "GORILLA", defaultComp),
          new Col("c", "TEXT", "PLAIN", defaultComp));
      fc.register("root.sg.sparse", cols, true);
      for (int g = 0; g < 2; g++) {
        Object[][] r = new Object[6][];
        for (int i = 0; i < 6; i++) {
          r[i] = new Object[] {(long) (g * 6 + i), g == 0 ? null : i * 0.5, null};
        }
        fc.write("root.sg.sparse", true, cols, times(g * 6, 6, 1), r);
        fc.flush();
      }
      end(fc);
    }

    // wide: more devices, and more series in one device, than one metadata index node holds
    // (256 by default), so the file's index has internal levels.
    {
      lib.configure(10000, 65536);
      FileCase fc = begin("wide", "tree", "300 devices", "300 series in one device",
          "metadata index with internal nodes");
      List<Col> one = Collections.singletonList(new Col("s", "INT32", "PLAIN", defaultComp));
      for (int d = 0; d < 300; d++) {
        String dev = String.format("root.sg.w%03d", d);
        fc.register(dev, one, false);
        fc.write(dev, false, one, times(d, 2, 1000), rows(one, 2, d, false, 0));
      }
      List<Col> many = new ArrayList<>();
      for (int m = 0; m < 300; m++) {
        many.add(new Col(String.format("s%03d", m), "INT64", "PLAIN", defaultComp));
      }
      fc.register("root.sg.wide", many, false);
      fc.write("root.sg.wide", false, many, times(0, 2, 1), rows(many, 2, 0, false, 0));
      end(fc);
    }

    // chunk-groups: two devices, three flushes, times interleaved between the devices.
    {
      lib.configure(10000, 65536);
      FileCase fc = begin("chunk-groups", "tree", "several chunk groups per device",
          "one page per chunk");
      fc.iotdbFlushes();
      List<Col> cols = allTypes("s_", defaultComp);
      fc.register("root.sg.d1", cols, false);
      fc.register("root.sg.d2", cols, false);
      for (int g = 0; g < 3; g++) {
        fc.write("root.sg.d1", false, cols, times(BASE_TIME + g * 1000L, 10, 2),
            rows(cols, 10, g * 10, false, 0));
        fc.write("root.sg.d2", false, cols, times(BASE_TIME + g * 1000L + 1, 10, 2),
            rows(cols, 10, g * 10 + 5, false, 0));
        fc.flush();
      }
      end(fc);
    }

    // overwrite: a second flush writes times 5..14 again (an unsequence file as IoTDB leaves
    // it): the same (series, time) twice in one file, the later chunk IoTDB's answer.
    {
      lib.configure(10000, 65536);
      FileCase fc = begin("overwrite", "tree", "repeated (series, time)", "aligned and not");
      fc.iotdbFlushes();
      List<Col> cols = Arrays.asList(new Col("v", "INT64", "PLAIN", defaultComp),
          new Col("x", "DOUBLE", "GORILLA", defaultComp));
      fc.register("root.sg.ow", cols, false);
      fc.register("root.sg.owa", cols, true);
      Object[][] first = new Object[10][];
      for (int i = 0; i < 10; i++) {
        first[i] = new Object[] {(long) i, i + 0.5};
      }
      fc.write("root.sg.ow", false, cols, times(0, 10, 1), first);
      fc.write("root.sg.owa", true, cols, times(0, 10, 1), first);
      fc.flush();
      Object[][] second = new Object[10][];
      for (int i = 0; i < 10; i++) {
        second[i] = new Object[] {1000L + i + 5, i == 1 ? null : 1000.25 + i};
      }
      fc.writeRaw("root.sg.ow", false, cols, times(5, 10, 1), second);
      fc.writeRaw("root.sg.owa", true, cols, times(5, 10, 1), second);
      end(fc);
    }

    // pages-one / pages-many: default limits with few points, and 7 points per page.
    {
      lib.configure(100000, 65536);
      FileCase fc = begin("pages-one", "tree", "one page per chunk (no page statistics)",
          "every type", "aligned and not");
      List<Col> cols = allTypes("s_", defaultComp);
      fc.register("root.sg.one", cols, false);
      fc.register("root.sg.one_al", cols, true);
      fc.write("root.sg.one", false, cols, times(BASE_TIME, 12, 1), rows(cols, 12, 0, true, 0));
      fc.write("root.sg.one_al", true, cols, times(BASE_TIME, 12, 1),
          rows(cols, 12, 0, true, 4));
      end(fc);
    }
    {
      lib.configure(7, 65536);
      FileCase fc = begin("pages-many", "tree", "many pages per chunk", "every type",
          "aligned and not");
      fc.iotdbFlushes();
      List<Col> cols = allTypes("s_", defaultComp);
      fc.register("root.sg.many", cols, false);
      fc.register("root.sg.many_al", cols, true);
      fc.write("root.sg.many", false, cols, times(BASE_TIME, 120, 3), rows(cols, 120, 0, true, 0));
      fc.write("root.sg.many_al", true, cols, times(BASE_TIME, 120, 3),
          rows(cols, 120, 0, true, 5));
      fc.extra.put("max_points_in_page", "7");
      end(fc);
    }

    // special-values: every edge value, PLAIN and uncompressed, aligned and not.
    {
      lib.configure(100000, 65536);
      FileCase fc = begin("special-values", "tree", "NaN and infinities", "int64 extremes",
          "NUL bytes and non-ASCII text", "every type", "negative times");
      fc.iotdbFlushes();
      List<Col> cols = new ArrayList<>();
      for (String t : lib.types()) {
        cols.add(new Col("s_" + t.toLowerCase(), t, "PLAIN", "UNCOMPRESSED"));
      }
      fc.register("root.sg.sp", cols, false);
      fc.register("root.sg.sp_al", cols, true);
      fc.write("root.sg.sp", false, cols, times(0, 8, 1), rows(cols, 8, 0, true, 0));
      fc.write("root.sg.sp_al", true, cols, times(0, 8, 1), rows(cols, 8, 0, true, 0));
      fc.flush();
      // Times before 1970: the 1.x writer refuses a negative first time, IoTDB's flush path
      // (the chunk writers) writes them.
      fc.writeRaw("root.sg.sp_neg", false, cols, times(-5, 8, 1), rows(cols, 8, 0, true, 0));
      fc.writeRaw("root.sg.sp_neg_al", true, cols, times(-5, 8, 1), rows(cols, 8, 0, true, 0));
      end(fc);
    }

    // names: non-ASCII and quoted device and measurement names.
    {
      lib.configure(100000, 65536);
      FileCase fc = begin("names", "tree", "non-ASCII names", "quoted names");
      String[][] names = {
        {"root.sg.温度计", "湿度"},
        {"root.sg.`d.1`", "`s.1`"},
        {"root.sg.`d-2 x`", "`s 2`"},
        {"root.`sg.x`.d3", "s3"},
      };
      for (String[] nm : names) {
        List<Col> cols = Collections.singletonList(new Col(nm[1], "INT32", "PLAIN", defaultComp));
        try {
          fc.register(nm[0], cols, false);
          fc.write(nm[0], false, cols, times(1, 3, 1), rows(cols, 3, 0, false, 0));
        } catch (Exception ex) {
          refuse("name " + nm[0] + "." + nm[1], "write", ex);
        }
      }
      end(fc);
    }

    // empty: opened and closed with no data.
    {
      lib.configure(100000, 65536);
      FileCase fc = begin("empty", "tree", "empty sealed file");
      end(fc);
    }

    if (lib.hasTableModel()) {
      runTable(defaultComp);
    }
    lib.configureDefaults();
  }

  void runTable(String defaultComp) throws Exception {
    {
      lib.configure(16, 65536);
      FileCase fc = begin("table", "table", "table model", "every type", "null tags",
          "nulls", "several chunk groups", "non-ASCII and quoted tags");
      fc.iotdbFlushes();
      List<String> tags = Arrays.asList("region", "site");
      List<Col> fields = allTypes("f_", defaultComp);
      fc.w.registerTable("t1", tags, fields);
      List<String> tags2 = Collections.singletonList("id");
      List<Col> fields2 = Collections.singletonList(new Col("v", "DOUBLE", "GORILLA", "LZ4"));
      fc.w.registerTable("t2", tags2, fields2);
      String[][] tagValues = {{"r1", "s1"}, {"r1", null}, {"北", "s\"q.x"}};
      for (int g = 0; g < 2; g++) {
        for (int d = 0; d < tagValues.length; d++) {
          int n = 30;
          Object[][] f = rows(fields, n, g * n + d, g == 0 && d == 0, 4);
          Object[][] r = new Object[n][];
          for (int i = 0; i < n; i++) {
            r[i] = new Object[2 + fields.size()];
            r[i][0] = tagValues[d][0];
            r[i][1] = tagValues[d][1];
            System.arraycopy(f[i], 0, r[i], 2, fields.size());
          }
          fc.writeTable("t1", tags, fields, times(BASE_TIME + g * 10000L, n, 10), r);
        }
        Object[][] r2 = new Object[5][];
        for (int i = 0; i < 5; i++) {
          r2[i] = new Object[] {"id" + g, i * 0.5};
        }
        fc.writeTable("t2", tags2, fields2, times(g, 5, 1), r2);
        fc.flush();
      }
      end(fc);
    }
    {
      lib.configure(10000, 65536);
      FileCase fc = begin("table-overwrite", "table", "table model",
          "repeated (series, time)");
      fc.iotdbFlushes();
      List<String> tags = Collections.singletonList("id");
      List<Col> fields = Arrays.asList(new Col("v", "INT64", "PLAIN", defaultComp),
          new Col("x", "DOUBLE", "GORILLA", defaultComp));
      fc.w.registerTable("t", tags, fields);
      Object[][] first = new Object[10][];
      for (int i = 0; i < 10; i++) {
        first[i] = new Object[] {"a", (long) i, i + 0.5};
      }
      fc.writeTable("t", tags, fields, times(0, 10, 1), first);
      fc.flush();
      Object[][] second = new Object[10][];
      for (int i = 0; i < 10; i++) {
        second[i] = new Object[] {1000L + i + 5, i == 1 ? null : 1000.25 + i};
      }
      fc.writeRawTable("t", Collections.singletonList("a"), fields, times(5, 10, 1), second);
      end(fc);
    }
  }

  void encodingFile(String name, String type, List<String> encodings, String comp,
      boolean iotdbWrites) throws Exception {
    lib.configure(20, 65536);
    List<Col> cols = new ArrayList<>();
    List<Boolean> special = new ArrayList<>();
    for (String e : encodings) {
      boolean plainOnly = e.endsWith("/plain");
      String enc = plainOnly ? e.substring(0, e.length() - 6) : e;
      cols.add(new Col("s_" + enc.toLowerCase(), type, enc, comp));
      special.add(!plainOnly);
    }
    FileCase fc = begin(name, "tree", "type " + type, "encodings " + String.join(" ", encodings),
        "many pages");
    String dev = "root.sg.enc_" + type.toLowerCase();
    int n = 100;
    for (Col c : cols) {
      fc.register(dev, Collections.singletonList(c), false);
    }
    for (int c = 0; c < cols.size(); c++) {
      List<Col> one = Collections.singletonList(cols.get(c));
      fc.write(dev, false, one, times(BASE_TIME, n, 1000), rows(one, n, 0, special.get(c), 0));
    }
    fc.extra.put("max_points_in_page", "20");
    if (!iotdbWrites) {
      fc.extra.put("iotdb_writes", "false");
    }
    end(fc);
  }

  /** The line's manifest: its files, what its writer accepted and what it refused. */
  void writeManifest() throws IOException {
    List<String> acc = new ArrayList<>();
    List<String> iot = new ArrayList<>();
    for (Map.Entry<String, List<String>> e : accepted.entrySet()) {
      acc.add(q(e.getKey()) + ": " + strList(e.getValue()));
      List<String> allowed = lib.iotdbEncodings(e.getKey());
      iot.add(q(e.getKey()) + ": " + (allowed == null ? "null" : strList(allowed)));
    }
    String text = "{\"line\": " + q(lib.line()) + ",\n \"library\": " + q(lib.library())
        + ",\n \"types\": " + strList(lib.types())
        + ",\n \"encodings\": " + strList(lib.encodings())
        + ",\n \"compressors\": " + strList(lib.compressors())
        + ",\n \"accepted_encodings\": {" + String.join(", ", acc) + "}"
        + ",\n \"iotdb_encodings\": {" + String.join(", ", iot) + "}"
        + ",\n \"accepted_compressors\": " + strList(acceptedCompressors)
        + ",\n \"refused\": [\n  " + String.join(",\n  ", refused) + "]"
        + ",\n \"files\": [\n  " + String.join(",\n  ", manifest) + "]}\n";
    Files.write(new File(root, "manifest.json").toPath(), text.getBytes(StandardCharsets.UTF_8));
  }

  /** A large file for benchmarks: a few non-aligned devices of mixed types, defaults. */
  static void bench(Lib lib, File file, long rows) throws Exception {
    lib.configureDefaults();
    W w = lib.open(file);
    String[] types = {"INT64", "DOUBLE", "FLOAT", "INT32", "BOOLEAN"};
    int devices = 4;
    List<Col> cols = new ArrayList<>();
    for (String t : types) {
      cols.add(new Col("s_" + t.toLowerCase(), t, lib.defaultEncoding(t), null));
    }
    for (int d = 0; d < devices; d++) {
      w.register("root.bench.d" + d, cols, false);
    }
    long perDevice = rows / devices;
    int batch = 10000;
    for (long start = 0; start < perDevice; start += batch) {
      int n = (int) Math.min(batch, perDevice - start);
      long[] t = times(BASE_TIME + start * 1000, n, 1000);
      Object[][] r = new Object[n][];
      for (int i = 0; i < n; i++) {
        long k = start + i;
        long noise = ((k * 6364136223846793005L + 1442695040888963407L) >>> 40) & 0x3FF;
        r[i] = new Object[] {k * 3 + noise, 20.0 + noise / 100.0, noise / 8.0f,
            (int) noise - 500, (noise & 1) == 0};
      }
      for (int d = 0; d < devices; d++) {
        w.write("root.bench.d" + d, false, cols, t, r);
      }
    }
    w.close();
  }

  /** The version of a Maven artifact on the class path, from the properties its jar carries. */
  static String mavenVersion(String group, String artifact) {
    String res = "/META-INF/maven/" + group + "/" + artifact + "/pom.properties";
    try (java.io.InputStream in = Corpus.class.getResourceAsStream(res)) {
      java.util.Properties p = new java.util.Properties();
      p.load(in);
      return group + ":" + artifact + ":" + p.getProperty("version");
    } catch (Exception e) {
      return group + ":" + artifact + ":?";
    }
  }

  /** Main of every generator: {@code OUT_DIR} or {@code --bench ROWS FILE}. */
  static void main(Lib lib, String[] args) throws Exception {
    if (args.length == 3 && args[0].equals("--bench")) {
      bench(lib, new File(args[2]), Long.parseLong(args[1]));
      return;
    }
    if (args.length != 1) {
      System.err.println("usage: Generate OUT_DIR | Generate --bench ROWS FILE");
      System.exit(2);
    }
    File root = new File(args[0], lib.line());
    root.mkdirs();
    Corpus c = new Corpus(lib, root);
    c.run();
    c.writeManifest();
  }
}
