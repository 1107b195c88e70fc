package io.sealsync.tsfile;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.tsfile.block.column.Column;
import org.apache.tsfile.compatibility.CompatibilityUtils;
import org.apache.tsfile.compatibility.DeserializeConfig;
import org.apache.tsfile.enums.TSDataType;
import org.apache.tsfile.file.metadata.AbstractAlignedChunkMetadata;
import org.apache.tsfile.file.metadata.ChunkMetadata;
import org.apache.tsfile.file.metadata.IChunkMetadata;
import org.apache.tsfile.file.metadata.IDeviceID;
import org.apache.tsfile.file.metadata.PlainDeviceID;
import org.apache.tsfile.file.metadata.TimeseriesMetadata;
import org.apache.tsfile.read.TsFileDeviceIterator;
import org.apache.tsfile.read.TsFileSequenceReader;
import org.apache.tsfile.read.common.Chunk;
import org.apache.tsfile.read.common.block.TsBlock;
import org.apache.tsfile.read.reader.IChunkReader;
import org.apache.tsfile.read.reader.IPageReader;
import org.apache.tsfile.read.reader.chunk.AlignedChunkReader;
import org.apache.tsfile.read.reader.chunk.ChunkReader;
import org.apache.tsfile.utils.Binary;
import org.apache.tsfile.utils.Pair;

/**
 * A TsFile's points, read with Apache TsFile's own Java reader (format 3, written by IoTDB
 * 0.12 to 1.3, and format 4, TsFile 2.x), as rows: per device, in time order, one value per
 * measurement or null.
 *
 * <p>No Spark here: {@code TsFileRows} turns these rows into a Dataset. What it reads is what
 * IoTDB's reader reads: each series' chunks in file order, every page decoded by the library.
 * Where a file holds one series' point at the same time twice (an unsequence file whose chunk
 * groups overlap), the later one in the file replaces the earlier, as IoTDB's merge does; for an
 * aligned device a null is no point, so it replaces nothing. A row whose every measurement is
 * null (or deleted) is not a row.
 */
public final class TsFilePoints implements AutoCloseable {
  /** What a caller gets per row; the values array is reused between rows. */
  public interface Sink {
    void row(String device, long time, Object[] values);
  }

  /**
   * An IoTDB deletion ({@code sealsync.formats.deletion.SeriesDeletion}): the points of every
   * series {@code pattern} matches ({@link PathPattern}) with {@code since <= time <= until}, in
   * the chunks whose header starts below {@code below} (IoTDB 0.12-1.x compare the deletion's file
   * offset with the chunk's: points written to the file after the DELETE stay; {@code
   * Long.MAX_VALUE}: every chunk). {@code where} names its line or byte for messages.
   *
   * <p>Or a table-model deletion ({@code sealsync.formats.deletion.TableDeletion}, its nodes
   * starting with {@link #WIRE_TABLE}, as {@code deletion.to_wire} writes them): the points of
   * the fields it names (none: every field) of each device of its table whose segments meet every
   * condition (a segment equal to a value, null for a NULL tag, a segment past the last one being
   * null; or the whole device equal to one), with {@code since <= time <= until}. A table-model
   * device is matched only by these, a tree device only by tree deletions.
   */
  public static final class Deletion implements java.io.Serializable {
    private static final long serialVersionUID = 3L;
    static final String WIRE_TABLE = "\u0000table";
    final String[] pattern;
    final long since;
    final long until;
    final long below;
    final String where;
    private String table; // null: a tree deletion
    private List<String> fields;
    private final List<Integer> segmentIndex = new ArrayList<>();
    private final List<String> segmentValue = new ArrayList<>();
    private final List<List<String>> devices = new ArrayList<>();

    public Deletion(String[] pattern, long since, long until, long below, String where) {
      this.pattern = pattern;
      this.since = since;
      this.until = until;
      this.below = below;
      this.where = where;
      if (pattern.length > 0 && WIRE_TABLE.equals(pattern[0])) {
        readTable();
      }
    }

    private void readTable() {
      try {
        table = pattern[1];
        int count = Integer.parseInt(pattern[2]);
        int at = 3 + count;
        if (count < 0 || at > pattern.length) {
          throw new IllegalArgumentException("measurement count " + count);
        }
        fields = Arrays.asList(Arrays.copyOfRange(pattern, 3, at));
        while (at < pattern.length) {
          if ("s".equals(pattern[at])) {
            segmentIndex.add(Integer.parseInt(pattern[at + 1]));
            segmentValue.add(pattern[at + 2]);
            at += 3;
          } else if ("d".equals(pattern[at])) {
            int n = Integer.parseInt(pattern[at + 1]);
            if (n < 1 || at + 2 + n > pattern.length) {
              throw new IllegalArgumentException("segment count " + n);
            }
            devices.add(Arrays.asList(Arrays.copyOfRange(pattern, at + 2, at + 2 + n)));
            at += 2 + n;
          } else {
            throw new IllegalArgumentException(pattern[at]);
          }
        }
      } catch (RuntimeException e) {
        throw new IllegalArgumentException(
            where + ": a table-model deletion that does not read back", e);
      }
    }

    /**
     * Whether this covers series {@code measurement} of {@code device}: a table-model device
     * when {@code segments} (its table, then its tags; trailing nulls dropped) is not null.
     */
    boolean covers(String device, String[] segments, String measurement) throws IOException {
      if (table == null) {
        return segments == null && PathPattern.matches(pattern, device, measurement, where);
      }
      if (segments == null || !table.equals(segments[0])) {
        return false;
      }
      if (!fields.isEmpty() && !fields.contains(measurement)) {
        return false;
      }
      for (int i = 0; i < segmentIndex.size(); i++) {
        int index = segmentIndex.get(i);
        String value = index < segments.length ? segments[index] : null;
        if (!java.util.Objects.equals(value, segmentValue.get(i))) {
          return false;
        }
      }
      for (List<String> d : devices) {
        if (!d.equals(Arrays.asList(segments))) {
          return false;
        }
      }
      return true;
    }
  }

  private static List<Deletion> covering(
      List<Deletion> deletions, String device, String[] segments, String name) throws IOException {
    List<Deletion> out = new ArrayList<>();
    for (Deletion d : deletions) {
      if (d.covers(device, segments, name)) {
        out.add(d);
      }
    }
    return out;
  }

  static {
    // Format 3 names a device by its path string. The library turns each into a device id
    // of segments with its path parser, generated by ANTLR 4.9, whose runtime cannot live
    // beside the newer one Spark ships (the parser's class fails to initialise). The
    // string itself is what the file holds and what IoTDB 0.12-1.3 name the device by, and
    // its order is the order of the file's index: keep it as it is.
    DeserializeConfig v3 = CompatibilityUtils.v3DeserializeConfig;
    v3.deviceIDBufferDeserializer = (buffer, context) -> PlainDeviceID.deserialize(buffer);
    v3.deviceIDStreamDeserializer = (stream, context) -> PlainDeviceID.deserialize(stream);
  }

  private final TsFileSequenceReader reader;
  private final String path;
  private final int format;
  private final Rules rules;

  /** A file read without {@link Rules}: every chunk the library decodes (benchmarks). */
  public TsFilePoints(String path) throws IOException {
    this(path, null);
  }

  /**
   * A file read as the loader reads it: refused, before any row, if its metadata says it is
   * encrypted, and at the first chunk whose data type and encoding {@code rules} refuse.
   */
  public TsFilePoints(String path, Rules rules) throws IOException {
    this.path = path;
    this.format = checkHead(path);
    this.rules = rules;
    this.reader = new TsFileSequenceReader(path);
    try {
      if (!reader.isComplete()) {
        throw new IOException("not a complete TsFile (its tail magic is missing)");
      }
      if (rules != null && format == 4) {
        rules.file(reader.readFileMetadata().getTsFileProperties());
      }
    } catch (IOException | RuntimeException e) {
      reader.close();
      throw e;
    }
  }

  /** Head magic and format version, read before the library does: it names nothing else. */
  private static int checkHead(String path) throws IOException {
    byte[] head = new byte[7];
    try (java.io.RandomAccessFile f = new java.io.RandomAccessFile(path, "r")) {
      if (f.length() < head.length) {
        throw new IOException("not a TsFile: " + f.length() + " bytes");
      }
      f.readFully(head);
    }
    if (!new String(head, 0, 6, StandardCharsets.ISO_8859_1).equals("TsFile")) {
      throw new IOException("not a TsFile: no TsFile magic at its start");
    }
    int version = head[6];
    if (version == '0' || version == 1 || version == 2) {
      throw new IOException(
          "TsFile format version 1 or 2 (IoTDB 0.9-0.11) is not supported; "
              + "only formats 3 (IoTDB 0.12-1.3) and 4 (IoTDB 2.x) are");
    }
    if (version != 3 && version != 4) {
      throw new IOException("unknown TsFile format version " + version);
    }
    return version;
  }

  public int version() {
    return format;
  }

  @Override
  public void close() throws IOException {
    reader.close();
  }

  /**
   * Measurement name to its type(s) over every device that has a point of it, from the
   * metadata only.
   */
  public Map<String, List<TSDataType>> measurements() throws IOException {
    Map<String, List<TSDataType>> out = new TreeMap<>();
    for (Map.Entry<IDeviceID, List<TimeseriesMetadata>> e :
        reader.getAllTimeseriesMetadata(false).entrySet()) {
      for (TimeseriesMetadata series : e.getValue()) {
        TSDataType type = series.getTsDataType();
        if (type == TSDataType.VECTOR || series.getMeasurementId().isEmpty()) {
          continue; // an aligned device's time column
        }
        if (series.getStatistics() != null && series.getStatistics().getCount() == 0) {
          continue; // no point: it gives the table no column (nor a type to agree with)
        }
        List<TSDataType> types = out.computeIfAbsent(series.getMeasurementId(), k -> new ArrayList<>());
        if (!types.contains(type)) {
          types.add(type);
        }
      }
    }
    return out;
  }

  private TsFileDeviceIterator devices;

  /**
   * Every row of the file, device by device (in the file's device order), each device's rows
   * in time order. {@code columns} gives each measurement's position in {@code values};
   * measurements not in it are read but not returned (there are none in the loader's use).
   */
  public long read(Map<String, Integer> columns, int width, List<Deletion> deletions, Sink sink)
      throws IOException {
    long rows = 0;
    long got;
    while ((got = readDevice(columns, width, deletions, sink)) >= 0) {
      rows += got;
    }
    return rows;
  }

  /**
   * The rows of the next device (see {@link #read}), how many, or -1 after the last device:
   * a caller that streams holds one device's points at a time, not the file's.
   */
  public long readDevice(
      Map<String, Integer> columns, int width, List<Deletion> deletions, Sink sink)
      throws IOException {
    if (devices == null) {
      devices = reader.getAllDevicesIteratorWithIsAligned();
    }
    if (!devices.hasNext()) {
      return -1;
    }
    Pair<IDeviceID, Boolean> next = devices.next();
    IDeviceID id = next.left;
    String[] segments = tableSegments(id);
    String device = segments == null ? id.toString() : TableDevice.name(segments);
    List<Series> series =
        Boolean.TRUE.equals(next.right)
            ? aligned(id, device, segments, deletions)
            : nonAligned(id, device, segments, deletions);
    List<Series> kept = new ArrayList<>(series.size());
    for (Series s : series) {
      s.settle();
      if (s.n > 0) {
        kept.add(s);
      }
    }
    return merge(device, kept, columns, new Object[width], sink);
  }

  private java.util.Set<String> tables;

  /**
   * A table-model device's segments (its table, then its tags, trailing nulls dropped), or null
   * for a tree-model one: a device is table-model when the file holds a schema of its table.
   */
  private String[] tableSegments(IDeviceID id) throws IOException {
    if (format != 4) {
      return null;
    }
    if (tables == null) {
      Map<String, ?> schemas = reader.getTableSchemaMap(); // the file metadata keeps none cached
      tables = schemas == null ? java.util.Set.of() : new java.util.HashSet<>(schemas.keySet());
    }
    if (!tables.contains(id.getTableName())) {
      return null;
    }
    Object[] raw = id.getSegments();
    String[] out = new String[raw.length];
    for (int i = 0; i < raw.length; i++) {
      out[i] = raw[i] == null ? null : raw[i].toString();
    }
    return out;
  }

  private List<Series> nonAligned(
      IDeviceID device, String path, String[] segments, List<Deletion> deletions)
      throws IOException {
    List<Series> out = new ArrayList<>();
    for (TimeseriesMetadata meta : reader.getDeviceTimeseriesMetadata(device)) {
      if (meta.getTsDataType() == TSDataType.VECTOR) {
        continue;
      }
      Series s = new Series(meta.getMeasurementId(), meta.getTsDataType());
      List<Deletion> hits = covering(deletions, path, segments, s.name);
      List<ChunkMetadata> chunks = new ArrayList<>(reader.readChunkMetaDataList(meta));
      chunks.sort((a, b) -> Long.compare(a.getOffsetOfChunkHeader(), b.getOffsetOfChunkHeader()));
      for (ChunkMetadata chunk : chunks) {
        int from = s.n;
        IChunkReader chunkReader = new ChunkReader(readChunk(chunk));
        for (IPageReader page : chunkReader.loadPageReaderList()) {
          TsBlock block = page.getAllSatisfiedData();
          s.add(block, 0);
        }
        s.deleteFrom(from, hits, chunk.getOffsetOfChunkHeader());
      }
      out.add(s);
    }
    return out;
  }

  private List<Series> aligned(
      IDeviceID device, String path, String[] segments, List<Deletion> deletions)
      throws IOException {
    List<Series> out = new ArrayList<>();
    for (TimeseriesMetadata meta : reader.getDeviceTimeseriesMetadataWithoutChunkMetadata(device)) {
      if (meta.getTsDataType() != TSDataType.VECTOR && !meta.getMeasurementId().isEmpty()) {
        out.add(new Series(meta.getMeasurementId(), meta.getTsDataType()));
      }
    }
    List<TSDataType> types = new ArrayList<>(out.size());
    List<List<Deletion>> hits = new ArrayList<>(out.size());
    for (Series s : out) {
      types.add(s.type);
      hits.add(covering(deletions, path, segments, s.name));
    }
    int[] from = new int[out.size()];
    List<AbstractAlignedChunkMetadata> chunks =
        new ArrayList<>(reader.getAlignedChunkMetadata(device, false));
    chunks.sort(
        (a, b) -> Long.compare(
            a.getTimeChunkMetadata().getOffsetOfChunkHeader(),
            b.getTimeChunkMetadata().getOffsetOfChunkHeader()));
    for (AbstractAlignedChunkMetadata chunk : chunks) {
      List<IChunkMetadata> valueMetas = chunk.getValueChunkMetadataList();
      if (valueMetas.size() != out.size()) {
        throw new IOException(
            "aligned device " + device + ": " + valueMetas.size() + " value chunks for "
                + out.size() + " measurements");
      }
      List<Chunk> valueChunks = new ArrayList<>(valueMetas.size());
      for (int i = 0; i < valueMetas.size(); i++) {
        IChunkMetadata v = valueMetas.get(i);
        if (v != null && !v.getMeasurementUid().equals(out.get(i).name)) {
          throw new IOException(
              "aligned device " + device + ": value chunk " + v.getMeasurementUid()
                  + " where " + out.get(i).name + " was expected");
        }
        valueChunks.add(v == null ? null : readChunk((ChunkMetadata) v));
      }
      Chunk time = readChunk((ChunkMetadata) chunk.getTimeChunkMetadata());
      for (int i = 0; i < out.size(); i++) {
        from[i] = out.get(i).n;
      }
      IChunkReader chunkReader = new AlignedChunkReader(time, valueChunks);
      for (IPageReader page : chunkReader.loadPageReaderList()) {
        page.initTsBlockBuilder(types); // an aligned page builds its block for these types
        TsBlock block = page.getAllSatisfiedData();
        for (int i = 0; i < out.size(); i++) {
          out.get(i).add(block, i);
        }
      }
      long timeOffset = chunk.getTimeChunkMetadata().getOffsetOfChunkHeader();
      for (int i = 0; i < out.size(); i++) {
        IChunkMetadata v = valueMetas.get(i);
        long offset = v == null ? timeOffset : v.getOffsetOfChunkHeader();
        out.get(i).deleteFrom(from[i], hits.get(i), offset);
      }
    }
    return out;
  }

  /** A chunk's bytes, refused (not allocated) when its stated place lies outside the file. */
  private Chunk readChunk(ChunkMetadata meta) throws IOException {
    long offset = meta.getOffsetOfChunkHeader();
    if (offset < 0 || offset >= reader.fileSize()) {
      throw new IOException("a chunk of " + meta.getMeasurementUid() + " starts outside the file");
    }
    Chunk chunk = reader.readMemChunk(meta);
    if (rules != null) { // the receiver's table: a chunk not decoded exactly is not read
      rules.chunk(
          format,
          chunk.getHeader().getDataType().serialize(),
          chunk.getHeader().getEncodingType().serialize(),
          chunk.getHeader().getMeasurementID());
    }
    return chunk;
  }

  /** One device's rows: a merge of its series, each in time order, on time. */
  private static long merge(
      String device, List<Series> series, Map<String, Integer> columns, Object[] values, Sink sink) {
    int m = series.size();
    if (m == 0) {
      return 0;
    }
    int[] at = new int[m];
    int[] slot = new int[m];
    for (int i = 0; i < m; i++) {
      Series s = series.get(i);
      Integer c = columns.get(key(s.name, s.type));
      if (c == null) {
        c = columns.get(s.name); // a caller that keys by name alone
      }
      slot[i] = c == null ? -1 : c;
    }
    long rows = 0;
    if (sameTimes(series)) { // the common case: a device's series written together
      Series first = series.get(0);
      for (int r = 0; r < first.n; r++) {
        Arrays.fill(values, null);
        boolean some = false;
        for (int i = 0; i < m; i++) {
          if (slot[i] >= 0) {
            values[slot[i]] = series.get(i).value(r);
            some = true;
          }
        }
        if (some) {
          sink.row(device, first.times[r], values);
          rows++;
        }
      }
      return rows;
    }
    while (true) {
      long time = Long.MAX_VALUE;
      boolean any = false;
      for (int i = 0; i < m; i++) {
        Series s = series.get(i);
        if (at[i] < s.n && (!any || s.times[at[i]] < time)) {
          time = s.times[at[i]];
          any = true;
        }
      }
      if (!any) {
        return rows;
      }
      Arrays.fill(values, null);
      boolean some = false;
      for (int i = 0; i < m; i++) {
        Series s = series.get(i);
        if (at[i] < s.n && s.times[at[i]] == time) {
          if (slot[i] >= 0) {
            values[slot[i]] = s.value(at[i]);
            some = true;
          }
          at[i]++;
        }
      }
      if (some) {
        sink.row(device, time, values);
        rows++;
      }
    }
  }

  private static boolean sameTimes(List<Series> series) {
    Series first = series.get(0);
    for (int i = 1; i < series.size(); i++) {
      Series s = series.get(i);
      if (s.n != first.n || !Arrays.equals(s.times, 0, s.n, first.times, 0, first.n)) {
        return false;
      }
    }
    return true;
  }

  /** One series' points in file order, then in time order with one point per time. */
  static final class Series {
    final String name;
    final TSDataType type;
    long[] times = new long[1024];
    long[] longs; // BOOLEAN (0/1), INT32, INT64, TIMESTAMP, DATE (yyyyMMdd)
    double[] doubles; // FLOAT, DOUBLE
    Binary[] binaries; // TEXT, STRING, BLOB
    int n;

    Series(String name, TSDataType type) {
      this.name = name;
      this.type = type;
      switch (type) {
        case FLOAT:
        case DOUBLE:
          doubles = new double[1024];
          break;
        case TEXT:
        case STRING:
        case BLOB:
          binaries = new Binary[1024];
          break;
        case BOOLEAN:
        case INT32:
        case INT64:
        case TIMESTAMP:
        case DATE:
          longs = new long[1024];
          break;
        default:
          throw new IllegalArgumentException("unsupported TsFile data type " + type + " of " + name);
      }
    }

    private void grow(int need) {
      if (need <= times.length) {
        return;
      }
      int size = Math.max(need, times.length * 2);
      times = Arrays.copyOf(times, size);
      if (longs != null) {
        longs = Arrays.copyOf(longs, size);
      } else if (doubles != null) {
        doubles = Arrays.copyOf(doubles, size);
      } else {
        binaries = Arrays.copyOf(binaries, size);
      }
    }

    /** The non-null values of column {@code index} of a page's block. */
    void add(TsBlock block, int index) {
      int count = block.getPositionCount();
      Column time = block.getTimeColumn();
      Column col = block.getColumn(index);
      grow(n + count);
      if (!col.mayHaveNull()) {
        for (int j = 0; j < count; j++) {
          times[n + j] = time.getLong(j);
        }
        switch (type) { // one switch per page, not per point
          case BOOLEAN:
            for (int j = 0; j < count; j++) {
              longs[n + j] = col.getBoolean(j) ? 1 : 0;
            }
            break;
          case INT32:
          case DATE:
            for (int j = 0; j < count; j++) {
              longs[n + j] = col.getInt(j);
            }
            break;
          case INT64:
          case TIMESTAMP:
            for (int j = 0; j < count; j++) {
              longs[n + j] = col.getLong(j);
            }
            break;
          case FLOAT:
            for (int j = 0; j < count; j++) {
              doubles[n + j] = col.getFloat(j);
            }
            break;
          case DOUBLE:
            for (int j = 0; j < count; j++) {
              doubles[n + j] = col.getDouble(j);
            }
            break;
          default:
            for (int j = 0; j < count; j++) {
              binaries[n + j] = col.getBinary(j);
            }
        }
        n += count;
        return;
      }
      for (int j = 0; j < count; j++) {
        if (col.isNull(j)) {
          continue;
        }
        times[n] = time.getLong(j);
        switch (type) {
          case BOOLEAN:
            longs[n] = col.getBoolean(j) ? 1 : 0;
            break;
          case INT32:
          case DATE:
            longs[n] = col.getInt(j);
            break;
          case INT64:
          case TIMESTAMP:
            longs[n] = col.getLong(j);
            break;
          case FLOAT:
            doubles[n] = col.getFloat(j);
            break;
          case DOUBLE:
            doubles[n] = col.getDouble(j);
            break;
          default:
            binaries[n] = col.getBinary(j);
        }
        n++;
      }
    }

    /**
     * Drop the points from index {@code from} on (one chunk's) that a deletion of {@code hits}
     * covers: one written below the chunk's header offset, over its closed time range.
     */
    void deleteFrom(int from, List<Deletion> hits, long chunkOffset) {
      // a deletion written below the chunk's header offset reaches it (TimeRanges.of); a
      // chunk written after the deletion keeps its points, as IoTDB does
      TimeRanges gone = TimeRanges.of(hits, chunkOffset);
      if (gone.isEmpty()) {
        return;
      }
      int w = from;
      for (int r = from; r < n; r++) {
        if (gone.covers(times[r])) {
          continue;
        }
        move(r, w++);
      }
      n = w;
    }

    private void move(int from, int to) {
      times[to] = times[from];
      if (longs != null) {
        longs[to] = longs[from];
      } else if (doubles != null) {
        doubles[to] = doubles[from];
      } else {
        binaries[to] = binaries[from];
      }
    }

    /** Time order, and of points at one time only the last in file order. */
    void settle() {
      boolean sorted = true;
      for (int i = 1; i < n; i++) {
        if (times[i] <= times[i - 1]) {
          sorted = false;
          break;
        }
      }
      if (sorted) {
        return;
      }
      Integer[] order = new Integer[n];
      for (int i = 0; i < n; i++) {
        order[i] = i;
      }
      Arrays.sort(order, (a, b) -> Long.compare(times[a], times[b])); // stable
      long[] t = new long[n];
      long[] l = longs == null ? null : new long[n];
      double[] d = doubles == null ? null : new double[n];
      Binary[] b = binaries == null ? null : new Binary[n];
      int w = -1;
      for (int k = 0; k < n; k++) {
        int i = order[k];
        if (w < 0 || t[w] != times[i]) {
          w++;
        } // else: a later point at the same time replaces the one kept so far
        t[w] = times[i];
        if (l != null) {
          l[w] = longs[i];
        } else if (d != null) {
          d[w] = doubles[i];
        } else {
          b[w] = binaries[i];
        }
      }
      times = t;
      longs = l;
      doubles = d;
      binaries = b;
      n = w + 1;
    }

    /** The value at {@code i} as the loader's column holds it. */
    Object value(int i) {
      switch (type) {
        case BOOLEAN:
          return longs[i] != 0;
        case INT32:
        case INT64:
        case TIMESTAMP:
          return longs[i];
        case DATE:
          return dateOf((int) longs[i]);
        case FLOAT:
        case DOUBLE:
          return doubles[i];
        case BLOB:
          return binaries[i].getValues();
        default:
          return new String(binaries[i].getValues(), StandardCharsets.UTF_8);
      }
    }
  }

  /** A DATE value (yyyyMMdd as an int) as a date. */
  static LocalDate dateOf(int yyyymmdd) {
    return LocalDate.of(yyyymmdd / 10000, (yyyymmdd / 100) % 100, yyyymmdd % 100);
  }

  /**
   * The key of a series' column: its measurement and the kind of its values, as the loader's
   * columns are keyed ({@code spark_loader/columns.py}): integers one kind, floating point
   * another, every other type its own.
   */
  public static String key(String measurement, TSDataType type) {
    return measurement + "\u0000" + kind(type);
  }

  /** The kind of column a TsFile type's values go to (see {@link #key}). */
  public static String kind(TSDataType type) {
    switch (type) {
      case BOOLEAN:
        return "boolean";
      case INT32:
      case INT64:
      case TIMESTAMP:
        return "long";
      case FLOAT:
      case DOUBLE:
        return "double";
      case BLOB:
        return "binary";
      case DATE:
        return "date";
      default:
        return "string";
    }
  }

  /** The columns of {@code names}, in order, as positions from {@code first}. */
  public static Map<String, Integer> positions(List<String> names, int first) {
    Map<String, Integer> out = new LinkedHashMap<>();
    for (int i = 0; i < names.size(); i++) {
      out.put(names.get(i), first + i);
    }
    return out;
  }

  public String path() {
    return path;
  }
}
