import java.io.File;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import org.apache.tsfile.common.conf.TSFileConfig;
import org.apache.tsfile.common.conf.TSFileDescriptor;
import org.apache.tsfile.enums.ColumnCategory;
import org.apache.tsfile.enums.TSDataType;
import org.apache.tsfile.file.metadata.AbstractAlignedChunkMetadata;
import org.apache.tsfile.file.metadata.ChunkMetadata;
import org.apache.tsfile.file.metadata.IChunkMetadata;
import org.apache.tsfile.file.metadata.IDeviceID;
import org.apache.tsfile.file.metadata.TableSchema;
import org.apache.tsfile.file.metadata.TimeseriesMetadata;
import org.apache.tsfile.file.metadata.enums.CompressionType;
import org.apache.tsfile.file.metadata.enums.TSEncoding;
import org.apache.tsfile.read.TsFileDeviceIterator;
import org.apache.tsfile.read.TsFileSequenceReader;
import org.apache.tsfile.read.common.BatchData;
import org.apache.tsfile.read.common.Chunk;
import org.apache.tsfile.read.reader.chunk.AlignedChunkReader;
import org.apache.tsfile.read.reader.chunk.ChunkReader;
import org.apache.tsfile.utils.Binary;
import org.apache.tsfile.utils.BitMap;
import org.apache.tsfile.utils.Pair;
import org.apache.tsfile.utils.TsPrimitiveType;
import org.apache.tsfile.write.TsFileWriter;
import org.apache.tsfile.write.chunk.AlignedChunkWriterImpl;
import org.apache.tsfile.write.chunk.ChunkWriterImpl;
import org.apache.tsfile.write.writer.TsFileIOWriter;
import org.apache.tsfile.write.record.TSRecord;
import org.apache.tsfile.write.record.Tablet;
import org.apache.tsfile.write.record.datapoint.BooleanDataPoint;
import org.apache.tsfile.write.record.datapoint.DataPoint;
import org.apache.tsfile.write.record.datapoint.DateDataPoint;
import org.apache.tsfile.write.record.datapoint.DoubleDataPoint;
import org.apache.tsfile.write.record.datapoint.FloatDataPoint;
import org.apache.tsfile.write.record.datapoint.IntDataPoint;
import org.apache.tsfile.write.record.datapoint.LongDataPoint;
import org.apache.tsfile.write.record.datapoint.StringDataPoint;
import org.apache.tsfile.write.schema.IMeasurementSchema;
import org.apache.tsfile.write.schema.MeasurementSchema;

/** The corpus as org.apache.tsfile:tsfile 2.x writes it (format v4, tree and table model). */
public final class Generate implements Corpus.Lib {
  private final TSFileConfig conf = TSFileDescriptor.getInstance().getConfig();
  private final int defaultPoints = conf.getMaxNumberOfPointsInPage();
  private final int defaultBytes = conf.getPageSizeInByte();

  public static void main(String[] args) throws Exception {
    Corpus.main(new Generate(), args);
  }

  @Override
  public String line() {
    return "tsfile-2";
  }

  @Override
  public String library() {
    return Corpus.mavenVersion("org.apache.tsfile", "tsfile");
  }

  @Override
  public List<String> types() {
    return Arrays.asList("BOOLEAN", "INT32", "INT64", "FLOAT", "DOUBLE", "TEXT", "STRING",
        "BLOB", "DATE", "TIMESTAMP");
  }

  @Override
  public List<String> encodings() {
    List<String> out = new ArrayList<>();
    for (TSEncoding e : TSEncoding.values()) {
      out.add(e.name());
    }
    return out;
  }

  @Override
  public List<String> compressors() {
    List<String> out = new ArrayList<>();
    for (CompressionType c : CompressionType.values()) {
      out.add(c.name());
    }
    return out;
  }

  @Override
  public String defaultEncoding(String type) {
    return defaults(type);
  }

  static String defaults(String type) {
    switch (type) {
      case "BOOLEAN":
        return "RLE";
      case "INT32":
      case "INT64":
      case "DATE":
      case "TIMESTAMP":
        return "TS_2DIFF";
      case "FLOAT":
      case "DOUBLE":
        return "GORILLA";
      default:
        return "PLAIN";
    }
  }

  @Override
  public List<String> iotdbEncodings(String type) {
    java.util.Set<TSEncoding> allowed =
        TSEncoding.TYPE_SUPPORTED_ENCODINGS.get(TSDataType.valueOf(type));
    if (allowed == null) {
      return null;
    }
    List<String> out = new ArrayList<>();
    for (TSEncoding e : TSEncoding.values()) {
      if (allowed.contains(e)) {
        out.add(e.name());
      }
    }
    return out;
  }

  @Override
  public boolean hasTableModel() {
    return true;
  }

  @Override
  public void configure(int maxPointsInPage, int pageSizeInByte) {
    conf.setMaxNumberOfPointsInPage(maxPointsInPage);
    conf.setPageSizeInByte(pageSizeInByte);
  }

  @Override
  public void configureDefaults() {
    configure(defaultPoints, defaultBytes);
  }

  static IMeasurementSchema schema(Corpus.Col c) {
    TSDataType t = TSDataType.valueOf(c.type);
    if (c.compressor == null) {
      return new MeasurementSchema(c.name, t, TSEncoding.valueOf(c.encoding));
    }
    return new MeasurementSchema(c.name, t, TSEncoding.valueOf(c.encoding),
        CompressionType.valueOf(c.compressor));
  }

  static List<IMeasurementSchema> schemas(List<Corpus.Col> cols) {
    List<IMeasurementSchema> out = new ArrayList<>();
    for (Corpus.Col c : cols) {
      out.add(schema(c));
    }
    return out;
  }

  static DataPoint point(Corpus.Col c, Object v) {
    switch (c.type) {
      case "BOOLEAN":
        return new BooleanDataPoint(c.name, (Boolean) v);
      case "INT32":
        return new IntDataPoint(c.name, (Integer) v);
      case "INT64":
      case "TIMESTAMP":
        return new LongDataPoint(c.name, (Long) v);
      case "FLOAT":
        return new FloatDataPoint(c.name, (Float) v);
      case "DOUBLE":
        return new DoubleDataPoint(c.name, (Double) v);
      case "DATE":
        return new DateDataPoint(c.name, (LocalDate) v);
      default:
        return new StringDataPoint(c.name, Chunks.binary(v));
    }
  }

  static void put(Tablet t, int row, int col, String type, Object v) {
    BitMap[] bm = t.getBitMaps();
    if (v == null) {
      if (bm == null) {
        t.initBitMaps();
        bm = t.getBitMaps();
      }
      bm[col].mark(row);
      return;
    }
    switch (type) {
      case "BOOLEAN":
        t.addValue(row, col, (boolean) (Boolean) v);
        break;
      case "INT32":
        t.addValue(row, col, (int) (Integer) v);
        break;
      case "INT64":
      case "TIMESTAMP":
        t.addValue(row, col, (long) (Long) v);
        break;
      case "FLOAT":
        t.addValue(row, col, (float) (Float) v);
        break;
      case "DOUBLE":
        t.addValue(row, col, (double) (Double) v);
        break;
      case "DATE":
        t.addValue(row, col, (LocalDate) v);
        break;
      default:
        t.addValue(row, col, v instanceof byte[] ? (byte[]) v
            : ((String) v).getBytes(StandardCharsets.UTF_8));
    }
    bm = t.getBitMaps();
    if (bm != null && bm[col] != null) {
      bm[col].unmark(row);
    }
  }

  @Override
  public Corpus.W open(File file) throws Exception {
    TsFileWriter w = new TsFileWriter(file);
    return new Corpus.W() {
      @Override
      public void register(String device, List<Corpus.Col> cols, boolean aligned)
          throws Exception {
        if (aligned) {
          w.registerAlignedTimeseries(device, schemas(cols));
        } else {
          for (Corpus.Col c : cols) {
            w.registerTimeseries(device, schema(c));
          }
        }
      }

      @Override
      public void write(String device, boolean aligned, List<Corpus.Col> cols, long[] times,
          Object[][] rows) throws Exception {
        if (!aligned) {
          for (int r = 0; r < times.length; r++) {
            TSRecord rec = new TSRecord(device, times[r]);
            for (int c = 0; c < cols.size(); c++) {
              if (rows[r][c] != null) {
                rec.addTuple(point(cols.get(c), rows[r][c]));
              }
            }
            w.writeRecord(rec);
          }
          return;
        }
        Tablet t = new Tablet(device, schemas(cols), times.length);
        t.initBitMaps();
        for (int r = 0; r < times.length; r++) {
          t.addTimestamp(r, times[r]);
          for (int c = 0; c < cols.size(); c++) {
            put(t, r, c, cols.get(c).type, rows[r][c]);
          }
        }
        t.setRowSize(times.length);
        w.writeAligned(t);
      }

      @Override
      public void registerTable(String table, List<String> tags, List<Corpus.Col> fields) {
        List<IMeasurementSchema> s = new ArrayList<>();
        List<ColumnCategory> cat = new ArrayList<>();
        for (String tag : tags) {
          s.add(new MeasurementSchema(tag, TSDataType.STRING));
          cat.add(ColumnCategory.TAG);
        }
        for (Corpus.Col c : fields) {
          s.add(schema(c));
          cat.add(ColumnCategory.FIELD);
        }
        w.registerTableSchema(new TableSchema(table, s, cat));
      }

      @Override
      public void writeTable(String table, List<String> tags, List<Corpus.Col> fields,
          long[] times, Object[][] rows) throws Exception {
        List<String> names = new ArrayList<>(tags);
        List<TSDataType> types = new ArrayList<>();
        List<ColumnCategory> cat = new ArrayList<>();
        for (String tag : tags) {
          types.add(TSDataType.STRING);
          cat.add(ColumnCategory.TAG);
        }
        for (Corpus.Col c : fields) {
          names.add(c.name);
          types.add(TSDataType.valueOf(c.type));
          cat.add(ColumnCategory.FIELD);
        }
        Tablet t = new Tablet(table, names, types, cat, times.length);
        t.initBitMaps();
        for (int r = 0; r < times.length; r++) {
          t.addTimestamp(r, times[r]);
          for (int c = 0; c < names.size(); c++) {
            put(t, r, c, types.get(c).name(), rows[r][c]);
          }
        }
        t.setRowSize(times.length);
        w.writeTable(t);
      }

      @Override
      public void writeRaw(String device, boolean aligned, List<Corpus.Col> cols, long[] times,
          Object[][] rows) throws Exception {
        raw(w.getIOWriter(), IDeviceID.Factory.DEFAULT_FACTORY.create(device), aligned, cols,
            times, rows);
      }

      @Override
      public void writeRawTable(String table, List<String> tagValues, List<Corpus.Col> fields,
          long[] times, Object[][] rows) throws Exception {
        String[] seg = new String[tagValues.size() + 1];
        seg[0] = table;
        for (int i = 0; i < tagValues.size(); i++) {
          seg[i + 1] = tagValues.get(i);
        }
        raw(w.getIOWriter(), IDeviceID.Factory.DEFAULT_FACTORY.create(seg), true, fields, times,
            rows);
      }

      @Override
      public void flush() throws Exception {
        w.flush();
      }

      @Override
      public void planIndices(long min, long max) throws Exception {
        TsFileIOWriter io = w.getIOWriter();
        io.setMinPlanIndex(min);
        io.setMaxPlanIndex(max);
        io.writePlanIndices();
      }

      @Override
      public void close() throws Exception {
        w.close();
      }
    };
  }

  static void raw(TsFileIOWriter io, IDeviceID device, boolean aligned, List<Corpus.Col> cols,
      long[] times, Object[][] rows) throws Exception {
    io.startChunkGroup(device);
    if (aligned) {
      AlignedChunkWriterImpl aw = new AlignedChunkWriterImpl(schemas(cols));
      Chunks.writeAligned(io, aw, cols, times, rows);
    } else {
      for (int c = 0; c < cols.size(); c++) {
        ChunkWriterImpl cw = new ChunkWriterImpl(schema(cols.get(c)));
        Chunks.writeSeries(io, cw, cols, c, times, rows);
      }
    }
    io.endChunkGroup();
  }

  static List<String> segments(IDeviceID d) {
    List<String> out = new ArrayList<>();
    for (Object s : d.getSegments()) {
      out.add(s == null ? null : s.toString());
    }
    return out;
  }

  @Override
  public void readBack(File file, Corpus.Sink sink) throws Exception {
    try (TsFileSequenceReader r = new TsFileSequenceReader(file.getPath())) {
      List<Pair<IDeviceID, Boolean>> devices = new ArrayList<>();
      TsFileDeviceIterator it = r.getAllDevicesIteratorWithIsAligned();
      while (it.hasNext()) {
        devices.add(it.next());
      }
      Map<IDeviceID, List<TimeseriesMetadata>> all = r.getAllTimeseriesMetadata(true);
      for (Pair<IDeviceID, Boolean> dv : devices) {
        IDeviceID dev = dv.left;
        String name = dev.toString();
        List<String> seg = segments(dev);
        if (dv.right) {
          for (AbstractAlignedChunkMetadata acm : r.getAlignedChunkMetadata(dev, false)) {
            IChunkMetadata tcm = acm.getTimeChunkMetadata();
            Chunk tc = r.readMemChunk((ChunkMetadata) tcm);
            List<Chunk> vcs = new ArrayList<>();
            List<String> ms = new ArrayList<>();
            List<String> ts = new ArrayList<>();
            for (IChunkMetadata v : acm.getValueChunkMetadataList()) {
              if (v == null) {
                continue;
              }
              vcs.add(r.readMemChunk((ChunkMetadata) v));
              ms.add(v.getMeasurementUid());
              ts.add(v.getDataType().name());
            }
            AlignedChunkReader cr = new AlignedChunkReader(tc, vcs);
            int pages = 0;
            while (cr.hasNextSatisfiedPage()) {
              pages++;
              BatchData bd = cr.nextPageData();
              while (bd.hasCurrent()) {
                TsPrimitiveType[] vals = bd.getVector();
                for (int j = 0; j < ms.size(); j++) {
                  if (vals[j] != null) {
                    sink.point(name, seg, ms.get(j), ts.get(j), bd.currentTime(),
                        Chunks.value(ts.get(j), vals[j]), tcm.getOffsetOfChunkHeader(), true);
                  }
                }
                bd.next();
              }
            }
            sink.chunk(name, "", pages, Chunks.onePage(tc));
          }
        } else {
          for (TimeseriesMetadata tm : all.get(dev)) {
            List<IChunkMetadata> cms = new ArrayList<>(tm.getChunkMetadataList());
            cms.sort(Comparator.comparingLong(IChunkMetadata::getOffsetOfChunkHeader));
            for (IChunkMetadata cm : cms) {
              String type = cm.getDataType().name();
              Chunk chunk = r.readMemChunk((ChunkMetadata) cm);
              ChunkReader cr = new ChunkReader(chunk);
              int pages = 0;
              while (cr.hasNextSatisfiedPage()) {
                pages++;
                BatchData bd = cr.nextPageData();
                while (bd.hasCurrent()) {
                  sink.point(name, seg, tm.getMeasurementId(), type, bd.currentTime(),
                      Chunks.value(type, bd.currentValue()), cm.getOffsetOfChunkHeader(), false);
                  bd.next();
                }
              }
              sink.chunk(name, tm.getMeasurementId(), pages, Chunks.onePage(chunk));
            }
          }
        }
      }
    }
  }
}
