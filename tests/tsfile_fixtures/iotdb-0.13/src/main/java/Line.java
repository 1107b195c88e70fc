import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.iotdb.tsfile.read.TsFileDeviceIterator;
import org.apache.iotdb.tsfile.read.TsFileSequenceReader;
import org.apache.iotdb.tsfile.read.common.Chunk;
import org.apache.iotdb.tsfile.read.reader.chunk.AlignedChunkReader;
import org.apache.iotdb.tsfile.read.reader.chunk.ChunkReader;
import org.apache.iotdb.tsfile.utils.Pair;

/**
 * What org.apache.iotdb:tsfile 0.13.x, IoTDB 0.13's own TsFile module, does apart from 1.x's:
 * the shared v3 generator (common/v3/Generate.java, its imports rewritten to this library's
 * packages) asks this class. Six data types, devices are strings, the chunk readers take a
 * filter (none here).
 */
final class Line {
  static final String NAME = "iotdb-0.13";
  static final String GROUP = "org.apache.iotdb";

  private Line() {}

  static List<String> types() {
    return Arrays.asList("BOOLEAN", "INT32", "INT64", "FLOAT", "DOUBLE", "TEXT");
  }

  static String defaultEncoding(String type) {
    switch (type) {
      case "BOOLEAN":
        return "RLE";
      case "INT32":
      case "INT64":
        return "RLE";
      case "FLOAT":
      case "DOUBLE":
        return "GORILLA";
      default:
        return "PLAIN";
    }
  }

  /** IoTDB 0.13's server (SchemaUtils) checks a new series' encoding against this list. */
  static List<String> iotdbEncodings(String type) {
    switch (type) {
      case "BOOLEAN":
        return Arrays.asList("PLAIN", "RLE");
      case "INT32":
      case "INT64":
        return Arrays.asList("PLAIN", "RLE", "TS_2DIFF", "GORILLA");
      case "FLOAT":
      case "DOUBLE":
        return Arrays.asList("PLAIN", "RLE", "TS_2DIFF", "GORILLA_V1", "GORILLA");
      case "TEXT":
        return Arrays.asList("PLAIN", "DICTIONARY");
      default:
        return null;
    }
  }

  static String device(String device) {
    return device;
  }

  static String name(String device) {
    return device;
  }

  static List<Pair<String, Boolean>> devices(TsFileSequenceReader r) throws Exception {
    List<Pair<String, Boolean>> out = new ArrayList<>();
    TsFileDeviceIterator it = r.getAllDevicesIteratorWithIsAligned();
    while (it.hasNext()) {
      out.add(it.next());
    }
    return out;
  }

  static ChunkReader chunkReader(Chunk chunk) throws Exception {
    return new ChunkReader(chunk, null);
  }

  static AlignedChunkReader alignedChunkReader(Chunk time, List<Chunk> values) throws Exception {
    return new AlignedChunkReader(time, values, null);
  }
}
