import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.List;
import org.apache.tsfile.read.common.Chunk;
import org.apache.tsfile.utils.Binary;
import org.apache.tsfile.utils.TsPrimitiveType;
import org.apache.tsfile.write.chunk.AlignedChunkWriterImpl;
import org.apache.tsfile.write.chunk.ChunkWriterImpl;
import org.apache.tsfile.write.writer.TsFileIOWriter;

/**
 * What every line's generator does alike with its library's chunk writers and readers: the raw
 * chunk group writer's rows (as IoTDB's memtable flush writes them) and the values read back.
 * Written against 1.x's packages and linked into iotdb-1.3 and tsfile-2; iotdb-0.13 gets a copy
 * with its imports rewritten by tests/tsfile_corpus.py (the classes are the same there).
 */
final class Chunks {
  private Chunks() {}

  /** Writes {@code rows} (one value per column, null for none) through an aligned writer. */
  static void writeAligned(TsFileIOWriter io, AlignedChunkWriterImpl aw, List<Corpus.Col> cols,
      long[] times, Object[][] rows) throws Exception {
    for (int r = 0; r < times.length; r++) {
      for (int c = 0; c < cols.size(); c++) {
        Object v = rows[r][c];
        boolean n = v == null;
        long t = times[r];
        switch (cols.get(c).type) {
          case "BOOLEAN":
            aw.write(t, !n && (Boolean) v, n);
            break;
          case "INT32":
            aw.write(t, n ? 0 : (Integer) v, n);
            break;
          case "DATE":
            aw.write(t, n ? 0 : Corpus.dateInt((LocalDate) v), n);
            break;
          case "INT64":
          case "TIMESTAMP":
            aw.write(t, n ? 0L : (Long) v, n);
            break;
          case "FLOAT":
            aw.write(t, n ? 0f : (Float) v, n);
            break;
          case "DOUBLE":
            aw.write(t, n ? 0.0 : (Double) v, n);
            break;
          default:
            aw.write(t, n ? new Binary(new byte[0]) : binary(v), n);
        }
      }
      aw.write(times[r]);
    }
    aw.writeToFileWriter(io);
  }

  /** Writes column {@code c} of {@code rows} through its own chunk writer, nulls skipped. */
  static void writeSeries(TsFileIOWriter io, ChunkWriterImpl cw, List<Corpus.Col> cols, int c,
      long[] times, Object[][] rows) throws Exception {
    for (int r = 0; r < times.length; r++) {
      Object v = rows[r][c];
      long t = times[r];
      if (v == null) {
        continue;
      }
      switch (cols.get(c).type) {
        case "BOOLEAN":
          cw.write(t, (boolean) (Boolean) v);
          break;
        case "INT32":
          cw.write(t, (int) (Integer) v);
          break;
        case "DATE":
          cw.write(t, (int) Corpus.dateInt((LocalDate) v));
          break;
        case "INT64":
        case "TIMESTAMP":
          cw.write(t, (long) (Long) v);
          break;
        case "FLOAT":
          cw.write(t, (float) (Float) v);
          break;
        case "DOUBLE":
          cw.write(t, (double) (Double) v);
          break;
        default:
          cw.write(t, binary(v));
      }
    }
    cw.writeToFileWriter(io);
  }

  static Binary binary(Object v) {
    return new Binary(v instanceof byte[] ? (byte[]) v
        : ((String) v).getBytes(StandardCharsets.UTF_8));
  }

  static Object value(String type, Object v) {
    if (v instanceof TsPrimitiveType) {
      v = ((TsPrimitiveType) v).getValue();
    }
    if (v instanceof Binary) {
      return ((Binary) v).getValues();
    }
    if (type.equals("DATE") && v instanceof Integer) {
      return Corpus.intDate((Integer) v);
    }
    return v;
  }

  /** A chunk of one page has its own header type and no page statistics. */
  static boolean onePage(Chunk c) {
    return (c.getHeader().getChunkType() & 0x3F) == 5;
  }
}
