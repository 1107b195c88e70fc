package io.sealsync.spark;

import io.sealsync.tsfile.Rules;
import io.sealsync.tsfile.TsFilePoints;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder;
import org.apache.spark.sql.catalyst.encoders.RowEncoder;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.tsfile.enums.TSDataType;

/**
 * TsFiles read into Spark rows on the executors, with Apache TsFile's Java reader.
 *
 * <p>The input is the loader's files DataFrame: {@code path, file_id, key, deletions}, the
 * deletions already parsed (an array of {@code pattern, since, until, below, where}: IoTDB's
 * deletions, {@link io.sealsync.tsfile.TsFilePoints.Deletion}). Two passes, as for any reader whose output
 * schema must be known first: {@link #schema} lists each file's measurements and their types
 * (from metadata), the driver merges them, and {@link #data} reads every row in that shape. A
 * file that fails makes the data pass fail with {@code sealsync-file-error[<file id>]: <reason>}
 * in the message, which the driver's failure isolation reads; in the schema pass it is an
 * {@code error} row.
 */
public final class TsFileRows {
  public static final String FILE_ERROR = "sealsync-file-error";
  /** The metadata of a target column naming the series it holds (spark_loader/columns.py). */
  static final String MEASUREMENT = "sealsync.measurement";

  static final String KIND = "sealsync.kind";
  public static final StructType SCHEMA_ROWS =
      new StructType()
          .add("file_id", DataTypes.StringType)
          .add("name", DataTypes.StringType)
          .add("type", DataTypes.StringType)
          .add("error", DataTypes.StringType);

  private TsFileRows() {}

  /** Whether the TsFile library is on this JVM's class path (the session's packages). */
  public static boolean usable() {
    try {
      Class.forName("org.apache.tsfile.read.TsFileSequenceReader");
      return true;
    } catch (ClassNotFoundException | LinkageError e) {
      return false;
    }
  }

  static Encoder<Row> encoder(StructType schema) {
    // lenient: a date may be a LocalDate whatever spark.sql.datetime.java8API.enabled says
    return ExpressionEncoder.apply(RowEncoder.encoderFor(schema, true));
  }

  /**
   * One row per measurement of each file, plus one per file (name null), or its error. {@code
   * rules}: the table of what is read exactly ({@link Rules}), here for a file's encryption.
   */
  public static Dataset<Row> schema(Dataset<Row> files, String rules) {
    return files.mapPartitions(new SchemaPass(new Rules(rules)), encoder(SCHEMA_ROWS));
  }

  /**
   * Every row of the files, shaped as {@code target} (time, device, measurements, key); a file
   * with a chunk {@code rules} refuse fails with that reason.
   */
  public static Dataset<Row> data(Dataset<Row> files, String targetJson, String rules) {
    StructType target = (StructType) DataType.fromJson(targetJson);
    return files.mapPartitions(new DataPass(target, new Rules(rules)), encoder(target));
  }

  /** Rows read by one call, for a benchmark of the reader alone (no Spark involved). */
  public static long count(String path) throws Exception {
    try (TsFilePoints points = new TsFilePoints(path)) {
      List<String> names = new ArrayList<>(points.measurements().keySet());
      long[] seen = new long[1];
      return points.read(
          TsFilePoints.positions(names, 0), names.size(), List.of(), (d, t, v) -> seen[0]++);
    }
  }

  static String oneLine(Throwable e) {
    String text = e.getMessage();
    if (text == null || text.isBlank()) {
      text = e.getClass().getSimpleName();
    } else if (e instanceof OutOfMemoryError || e instanceof RuntimeException
        && !(e instanceof IllegalArgumentException || e instanceof IllegalStateException)) {
      text = e.getClass().getSimpleName() + ": " + text;
    }
    return text.replaceAll("\\s+", " ").trim();
  }

  static DataType sparkType(TSDataType t) {
    switch (t) {
      case BOOLEAN:
        return DataTypes.BooleanType;
      case INT32:
        return DataTypes.IntegerType;
      case INT64:
      case TIMESTAMP:
        return DataTypes.LongType;
      case FLOAT:
        return DataTypes.FloatType;
      case DOUBLE:
        return DataTypes.DoubleType;
      case TEXT:
      case STRING:
        return DataTypes.StringType;
      case BLOB:
        return DataTypes.BinaryType;
      case DATE:
        return DataTypes.DateType;
      default:
        throw new IllegalArgumentException("unsupported TsFile data type " + t);
    }
  }

  static List<TsFilePoints.Deletion> deletions(Row file, int index) {
    List<TsFilePoints.Deletion> out = new ArrayList<>();
    if (index < 0 || file.isNullAt(index)) {
      return out;
    }
    for (Row d : file.<Row>getList(index)) {
      List<String> pattern = d.getList(0);
      out.add(
          new TsFilePoints.Deletion(
              pattern.toArray(new String[0]),
              d.getLong(1),
              d.getLong(2),
              d.isNullAt(3) ? Long.MAX_VALUE : d.getLong(3),
              d.getString(4)));
    }
    return out;
  }

  static final class SchemaPass implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 2L;
    private final Rules rules;

    SchemaPass(Rules rules) {
      this.rules = rules;
    }

    @Override
    public Iterator<Row> call(Iterator<Row> files) {
      List<Row> out = new ArrayList<>();
      while (files.hasNext()) {
        Row file = files.next();
        String path = file.getString(file.fieldIndex("path"));
        String fid = file.getString(file.fieldIndex("file_id"));
        List<Row> rows = new ArrayList<>();
        try (ExecutorCopy local = ExecutorCopy.of(path);
            TsFilePoints points = new TsFilePoints(local.path(), rules)) {
          rows.add(RowFactory.create(fid, null, null, null));
          for (Map.Entry<String, List<TSDataType>> e : points.measurements().entrySet()) {
            String name = e.getKey();
            List<String> kinds = new ArrayList<>();
            for (TSDataType t : e.getValue()) { // one row per kind: each has its column
              if (!kinds.contains(TsFilePoints.kind(t))) {
                kinds.add(TsFilePoints.kind(t));
                rows.add(RowFactory.create(fid, name, sparkType(t).json(), null));
              }
            }
          }
        } catch (Exception | OutOfMemoryError | StackOverflowError e) {
          rows.clear();
          rows.add(RowFactory.create(fid, null, null, oneLine(e)));
        }
        out.addAll(rows);
      }
      return out.iterator();
    }
  }

  static final class DataPass implements MapPartitionsFunction<Row, Row> {
    private static final long serialVersionUID = 2L;
    private final StructType target;
    private final Rules rules;

    DataPass(StructType target, Rules rules) {
      this.target = target;
      this.rules = rules;
    }

    @Override
    public Iterator<Row> call(Iterator<Row> files) {
      return new Rows(target, files, rules);
    }
  }

  /** The rows of one partition's files, read one device at a time as they are asked for. */
  static final class Rows implements Iterator<Row> {
    private final Iterator<Row> files;
    private final int width;
    private final boolean[] toDouble;
    private final Map<String, Integer> columns;
    private final Rules rules;
    private final List<Row> current = new ArrayList<>();
    private int next;
    private TsFilePoints open;
    private ExecutorCopy copy;
    private String fid;
    private Object key;
    private List<TsFilePoints.Deletion> deletions;

    Rows(StructType target, Iterator<Row> files, Rules rules) {
      this.files = files;
      this.rules = rules;
      StructField[] fields = target.fields();
      this.width = fields.length;
      List<String> names = new ArrayList<>();
      toDouble = new boolean[width];
      for (int i = 2; i < width - 1; i++) {
        Metadata meta = fields[i].metadata();
        // a column keyed by the series it holds (measurement and kind), else by its name
        names.add(
            meta.contains(MEASUREMENT) && meta.contains(KIND)
                ? meta.getString(MEASUREMENT) + "\u0000" + meta.getString(KIND)
                : fields[i].name());
        toDouble[i] = fields[i].dataType().equals(DataTypes.DoubleType);
      }
      columns = TsFilePoints.positions(names, 2);
    }

    @Override
    public boolean hasNext() {
      while (next >= current.size()) {
        current.clear();
        next = 0;
        if (open == null) {
          if (!files.hasNext()) {
            return false;
          }
          start(files.next());
        }
        fill();
      }
      return true;
    }

    @Override
    public Row next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      return current.get(next++);
    }

    private void start(Row file) {
      String path = file.getString(file.fieldIndex("path"));
      fid = file.getString(file.fieldIndex("file_id"));
      key = file.get(file.fieldIndex("key"));
      int at = -1;
      try {
        at = file.fieldIndex("deletions");
      } catch (IllegalArgumentException e) {
        // no deletions column: none
      }
      try {
        deletions = deletions(file, at);
        copy = ExecutorCopy.of(path);
        open = new TsFilePoints(copy.path(), rules);
      } catch (Exception | OutOfMemoryError | StackOverflowError e) {
        release();
        throw fail(e);
      }
    }

    /** The next device's rows into {@code current}; closes the file after its last. */
    private void fill() {
      try {
        long got =
            open.readDevice(
                columns,
                width,
                deletions,
                (device, time, values) -> {
                  Object[] row = values.clone();
                  row[0] = time;
                  row[1] = device;
                  row[width - 1] = key;
                  for (int i = 2; i < width - 1; i++) {
                    if (toDouble[i] && row[i] instanceof Long) {
                      row[i] = ((Long) row[i]).doubleValue();
                    }
                  }
                  current.add(RowFactory.create(row));
                });
        if (got < 0) {
          TsFilePoints done = open;
          open = null;
          try {
            done.close();
          } finally {
            release();
          }
        }
      } catch (Exception | OutOfMemoryError | StackOverflowError e) {
        release();
        throw fail(e);
      }
    }

    /** Close the file (if open) and delete its executor copy (if any). */
    private void release() {
      if (open != null) {
        try {
          open.close();
        } catch (Exception ignored) {
          // the file's error, if any, is the one to report
        }
        open = null;
      }
      if (copy != null) {
        copy.close();
        copy = null;
      }
    }

    private RuntimeException fail(Throwable e) {
      return new RuntimeException(FILE_ERROR + "[" + fid + "]: " + oneLine(e));
    }
  }
}
