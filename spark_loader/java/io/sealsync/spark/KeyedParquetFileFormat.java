package io.sealsync.spark;

import java.util.Arrays;
import java.util.HashMap;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.ProjectingInternalRow;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's Parquet writer, one folder per value of the last column, which is not stored.
 *
 * <p>The loader writes each source file's rows into a folder of their own, named by the
 * file's number in the batch: an int column, last in every row. Spark's own way to do
 * that, {@code partitionBy}, sorts a task's rows by the column (or holds a writer per
 * value open), then copies every row to drop the column. Here the rows arrive grouped
 * already (a task reads its files one after the other), so a change of value only
 * closes one Parquet file and opens the next, in {@code <task folder>/<column>=<value>/};
 * the column is hidden from the Parquet writer by a view of the row, not a copy. The
 * output is laid out as {@code partitionBy} lays it out, and Spark's commit protocol
 * moves it the same way, because it moves a task's folder whole. A value met again in
 * the same task gets another file in its folder, so rows in any order are still
 * written in full.
 */
public class KeyedParquetFileFormat extends ParquetFileFormat {
  @Override
  public OutputWriterFactory prepareWrite(
      SparkSession session,
      Job job,
      scala.collection.immutable.Map<String, String> options,
      StructType dataSchema) {
    StructField[] fields = dataSchema.fields();
    int n = fields.length - 1;
    if (n < 1 || !fields[n].dataType().equals(DataTypes.IntegerType)) {
      throw new IllegalArgumentException(
          "the last column must be the int folder key, got " + dataSchema.simpleString());
    }
    StructType stored = new StructType(Arrays.copyOf(fields, n));
    return new Factory(super.prepareWrite(session, job, options, stored), stored, fields[n].name());
  }

  /**
   * Whether this Spark can run the class: the method it overrides and the row view it
   * uses are what it was compiled against (else Spark's own writer must be used).
   */
  public static boolean usable() {
    try {
      Class<?> self = KeyedParquetFileFormat.class;
      if (!self.getMethod("prepareWrite", SparkSession.class, Job.class,
              scala.collection.immutable.Map.class, StructType.class)
          .getDeclaringClass().equals(self)) {
        return false;
      }
      view(new StructType().add("x", DataTypes.IntegerType));
      return true;
    } catch (ReflectiveOperationException | LinkageError e) {
      return false;
    }
  }

  /** The first {@code stored.length()} columns of a row, read in place. */
  static ProjectingInternalRow view(StructType stored) {
    Object[] ordinals = new Object[stored.length()];
    for (int i = 0; i < ordinals.length; i++) {
      ordinals[i] = i;
    }
    return new ProjectingInternalRow(
        stored, scala.collection.immutable.ArraySeq.unsafeWrapArray(ordinals));
  }

  static final class Factory extends OutputWriterFactory {
    private final OutputWriterFactory parquet;
    private final StructType stored;
    private final String key;

    Factory(OutputWriterFactory parquet, StructType stored, String key) {
      this.parquet = parquet;
      this.stored = stored;
      this.key = key;
    }

    @Override
    public String getFileExtension(TaskAttemptContext context) {
      return parquet.getFileExtension(context);
    }

    @Override
    public OutputWriter newInstance(String path, StructType schema, TaskAttemptContext context) {
      return new Writer(this, path, context);
    }
  }

  /** One task's rows: a Parquet file per run of equal keys, under the task's folder. */
  static final class Writer extends OutputWriter {
    private final Factory factory;
    private final String path;
    private final TaskAttemptContext context;
    private final int keyIndex;
    private final ProjectingInternalRow row;
    private final HashMap<Integer, Integer> opened = new HashMap<>();
    private OutputWriter current;
    private int currentKey;

    Writer(Factory factory, String path, TaskAttemptContext context) {
      this.factory = factory;
      this.path = path;
      this.context = context;
      this.keyIndex = factory.stored.length();
      this.row = view(factory.stored);
    }

    @Override
    public void write(InternalRow record) {
      int key = record.getInt(keyIndex);
      if (current == null || key != currentKey) {
        open(key);
      }
      row.project(record);
      current.write(row);
    }

    private void open(int key) {
      close();
      int slash = path.lastIndexOf('/');
      String name = path.substring(slash + 1);
      int times = opened.merge(key, 1, Integer::sum);
      if (times > 1) { // part-00000-<uuid>.c000.snappy.parquet -> part-00000-<uuid>-2.c000...
        int dot = name.indexOf('.') < 0 ? name.length() : name.indexOf('.');
        name = name.substring(0, dot) + "-" + times + name.substring(dot);
      }
      String folder = path.substring(0, slash + 1) + factory.key + "=" + key + "/";
      current = factory.parquet.newInstance(folder + name, factory.stored, context);
      currentKey = key;
    }

    @Override
    public void close() {
      OutputWriter open = current;
      current = null;
      if (open != null) {
        open.close();
      }
    }

    @Override
    public String path() {
      return path;
    }
  }
}
