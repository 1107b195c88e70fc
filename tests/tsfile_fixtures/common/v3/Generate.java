import java.io.File;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import org.apache.tsfile.common.conf.TSFileConfig;
import org.apache.tsfile.common.conf.TSFileDescriptor;
import org.apache.tsfile.enums.TSDataType;
import org.apache.tsfile.file.metadata.AlignedChunkMetadata;
import org.apache.tsfile.file.metadata.ChunkMetadata;
import org.apache.tsfile.file.metadata.IChunkMetadata;
import org.apache.tsfile.read.common.Path;
import org.apache.tsfile.write.schema.IMeasurementSchema;
import org.apache.tsfile.file.metadata.TimeseriesMetadata;
import org.apache.tsfile.file.metadata.enums.CompressionType;
import org.apache.tsfile.file.metadata.enums.TSEncoding;
import org.apache.tsfile.read.TsFileSequenceReader;
import org.apache.tsfile.read.common.BatchData;
import org.apache.tsfile.read.common.Chunk;
import org.apache.tsfile.utils.Binary;
import org.apache.tsfile.utils.TsPrimitiveType;
import org.apache.tsfile.write.TsFileWriter;
import org.apache.tsfile.write.chunk.AlignedChunkWriterImpl;
import org.apache.tsfile.write.chunk.ChunkWriterImpl;
import org.apache.tsfile.write.writer.TsFileIOWriter;
import org.apache.tsfile.write.record.TSRecord;
import org.apache.tsfile.write.record.Tablet;
import org.apache.tsfile.write.record.datapoint.BooleanDataPoint;
import org.apache.tsfile.write.record.datapoint.DataPoint;
import org.apache.tsfile.write.record.datapoint.DoubleDataPoint;
import org.apache.tsfile.write.record.datapoint.FloatDataPoint;
import org.apache.tsfile.write.record.datapoint.IntDataPoint;
import org.apache.tsfile.write.record.datapoint.LongDataPoint;
import org.apache.tsfile.write.record.datapoint.StringDataPoint;
import org.apache.tsfile.write.schema.MeasurementSchema;

/**
 * The corpus in format v3, tree model, as IoTDB 0.13 and 1.3 write it. One source serves both
 * projects: written against 1.x's packages (iotdb-1.3 links it), its imports rewritten to 0.13's
 * by tests/tsfile_corpus.py; what the two libraries do differently is in each project's Line.
 */
public final class Generate implements Corpus.Lib {
  private final TSFileConfig conf = TSFileDescriptor.getInstance().getConfig();
  private final int defaultPoints = conf.getMaxNumberOfPointsInPage();
  private final int defaultBytes = conf.getPageSizeInByte();

  public static void main(String[] args) throws Exception {
    Corpus.main(new Generate(), args);
  }

  @Override
  public String line() {
    return Line.NAME;
  }

  @Override
  public String library() {
    return Corpus.mavenVersion(Line.GROUP, "tsfile");
  }

  @Override
  public List<String> types() {
    return Line.types();
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
    return Line.defaultEncoding(type);
  }

  @Override
  public List<String> iotdbEncodings(String type) {
    return Line.iotdbEncodings(type);
  }

  @Override
  public boolean hasTableModel() {
    return false;
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

  static MeasurementSchema schema(Corpus.Col c) {
    TSDataType t = TSDataType.valueOf(c.type);
    if (c.compressor == null) {
      return new MeasurementSchema(c.name, t, TSEncoding.valueOf(c.encoding));
    }
    return new MeasurementSchema(c.name, t, TSEncoding.valueOf(c.encoding),
        CompressionType.valueOf(c.compressor));
  }

  static List<MeasurementSchema> schemas(List<Corpus.Col> cols) {
    List<MeasurementSchema> out = new ArrayList<>();
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
        return new IntDataPoint(c.name, Corpus.dateInt((LocalDate) v));
      default:
        return new StringDataPoint(c.name, Chunks.binary(v));
    }
  }

  static void put(Tablet t, int row, int col, String type, Object v) {
    if (v == null) {
      t.bitMaps[col].mark(row);
      return;
    }
    t.bitMaps[col].unmark(row);
    Object a = t.values[col];
    if (a instanceof boolean[]) {
      ((boolean[]) a)[row] = (Boolean) v;
    } else if (a instanceof int[]) {
      ((int[]) a)[row] = v instanceof LocalDate ? Corpus.dateInt((LocalDate) v) : (Integer) v;
    } else if (a instanceof long[]) {
      ((long[]) a)[row] = (Long) v;
    } else if (a instanceof float[]) {
      ((float[]) a)[row] = (Float) v;
    } else if (a instanceof double[]) {
      ((double[]) a)[row] = (Double) v;
    } else if (a instanceof LocalDate[]) {
      ((LocalDate[]) a)[row] = (LocalDate) v;
    } else {
      ((Binary[]) a)[row] = Chunks.binary(v);
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
          w.registerAlignedTimeseries(new Path(device), schemas(cols));
        } else {
          for (Corpus.Col c : cols) {
            w.registerTimeseries(new Path(device), schema(c));
          }
        }
      }

      @Override
      public void write(String device, boolean aligned, List<Corpus.Col> cols, long[] times,
          Object[][] rows) throws Exception {
        if (!aligned) {
          for (int r = 0; r < times.length; r++) {
            TSRecord rec = new TSRecord(times[r], device);
            for (int c = 0; c < cols.size(); c++) {
              if (rows[r][c] != null) {
                rec.addTuple(point(cols.get(c), rows[r][c]));
              }
            }
            w.write(rec);
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
        t.rowSize = times.length;
        w.writeAligned(t);
      }

      @Override
      public void registerTable(String table, List<String> tags, List<Corpus.Col> fields) {
        throw new UnsupportedOperationException("no table model before TsFile 2");
      }

      @Override
      public void writeTable(String table, List<String> tags, List<Corpus.Col> fields,
          long[] times, Object[][] rows) {
        throw new UnsupportedOperationException("no table model before TsFile 2");
      }

      @Override
      public void writeRaw(String device, boolean aligned, List<Corpus.Col> cols, long[] times,
          Object[][] rows) throws Exception {
        raw(w.getIOWriter(), device, aligned, cols, times, rows);
      }

      @Override
      public void writeRawTable(String table, List<String> tagValues, List<Corpus.Col> fields,
          long[] times, Object[][] rows) {
        throw new UnsupportedOperationException("no table model before TsFile 2");
      }

      @Override
      public void flush() throws Exception {
        w.flushAllChunkGroups();
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

  static void raw(TsFileIOWriter io, String device, boolean aligned, List<Corpus.Col> cols,
      long[] times, Object[][] rows) throws Exception {
    io.startChunkGroup(Line.device(device));
    if (aligned) {
      AlignedChunkWriterImpl aw = new AlignedChunkWriterImpl(new ArrayList<IMeasurementSchema>(schemas(cols)));
      Chunks.writeAligned(io, aw, cols, times, rows);
    } else {
      for (int c = 0; c < cols.size(); c++) {
        ChunkWriterImpl cw = new ChunkWriterImpl(schema(cols.get(c)));
        Chunks.writeSeries(io, cw, cols, c, times, rows);
      }
    }
    io.endChunkGroup();
  }

  @Override
  public void readBack(File file, Corpus.Sink sink) throws Exception {
    try (TsFileSequenceReader r = new TsFileSequenceReader(file.getPath())) {
      var devices = Line.devices(r);
      var all = r.getAllTimeseriesMetadata(true);
      for (var dv : devices) {
        var dev = dv.left;
        String name = Line.name(dev);
        List<String> seg = null;
        if (dv.right) {
          for (AlignedChunkMetadata acm : r.getAlignedChunkMetadata(dev)) {
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
            var cr = Line.alignedChunkReader(tc, vcs);
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
              var cr = Line.chunkReader(chunk);
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
