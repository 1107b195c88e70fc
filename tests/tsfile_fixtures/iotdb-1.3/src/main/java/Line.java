import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import org.apache.tsfile.enums.TSDataType;
import org.apache.tsfile.file.metadata.IDeviceID;
import org.apache.tsfile.file.metadata.PlainDeviceID;
import org.apache.tsfile.file.metadata.enums.TSEncoding;
import org.apache.tsfile.read.TsFileDeviceIterator;
import org.apache.tsfile.read.TsFileSequenceReader;
import org.apache.tsfile.read.common.Chunk;
import org.apache.tsfile.read.reader.chunk.AlignedChunkReader;
import org.apache.tsfile.read.reader.chunk.ChunkReader;
import org.apache.tsfile.utils.Pair;

/**
 * What org.apache.tsfile:tsfile 1.1.x, the TsFile library IoTDB 1.3.x depends on, does apart
 * from 0.13's: the shared v3 generator (common/v3/Generate.java) asks this class. Devices are
 * IDeviceIDs, the chunk readers take no filter, the server checks encodings against the
 * library's own table.
 */
final class Line {
  static final String NAME = "iotdb-1.3";
  static final String GROUP = "org.apache.tsfile";

  private Line() {}

  static List<String> types() {
    return Arrays.asList("BOOLEAN", "INT32", "INT64", "FLOAT", "DOUBLE", "TEXT", "STRING",
        "BLOB", "DATE", "TIMESTAMP");
  }

  static String defaultEncoding(String type) {
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

  static List<String> iotdbEncodings(String type) {
    Set<TSEncoding> allowed = TSEncoding.TYPE_SUPPORTED_ENCODINGS.get(TSDataType.valueOf(type));
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

  static IDeviceID device(String device) {
    return new PlainDeviceID(device);
  }

  static String name(IDeviceID device) {
    return ((PlainDeviceID) device).toStringID();
  }

  static List<Pair<IDeviceID, Boolean>> devices(TsFileSequenceReader r) throws Exception {
    List<Pair<IDeviceID, Boolean>> out = new ArrayList<>();
    TsFileDeviceIterator it = r.getAllDevicesIteratorWithIsAligned();
    while (it.hasNext()) {
      out.add(it.next());
    }
    return out;
  }

  static ChunkReader chunkReader(Chunk chunk) throws Exception {
    return new ChunkReader(chunk);
  }

  static AlignedChunkReader alignedChunkReader(Chunk time, List<Chunk> values) throws Exception {
    return new AlignedChunkReader(time, values);
  }
}
