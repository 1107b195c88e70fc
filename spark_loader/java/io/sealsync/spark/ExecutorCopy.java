package io.sealsync.spark;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkEnv;
import org.apache.spark.deploy.SparkHadoopUtil;
import org.apache.spark.util.Utils;

/**
 * A received file where the TsFile library can open it: the file itself when its path is
 * local, else a copy in the executor's local scratch folder, deleted on {@link #close}.
 *
 * <p>Why a copy: the library reads a file by a local path ({@code java.io} and NIO channels), and
 * an executor that shares no folder with the loader's driver finds a received file only on the
 * table's store (HDFS, S3...), where the driver put it. One streamed read of the whole file is
 * also what an object store serves fastest: the reader's many small positioned reads would each
 * be a request. The copy is made with the executor's Hadoop configuration (the session's {@code
 * spark.hadoop.*} settings: endpoints, credentials), in Spark's local folder ({@code
 * spark.local.dir}), without Hadoop's checksum sidecar.
 */
public final class ExecutorCopy implements AutoCloseable {
  private final String path;
  private final File temporary;

  private ExecutorCopy(String path, File temporary) {
    this.path = path;
    this.temporary = temporary;
  }

  /** Whether {@code path} names a file system other than the local one (a URI). */
  static boolean remote(String path) {
    int colon = path.indexOf("://");
    if (colon <= 0) {
      return false;
    }
    String scheme = URI.create(path.substring(0, colon) + ":/").getScheme();
    return scheme != null && !scheme.equalsIgnoreCase("file");
  }

  /** The file at {@code path}, copied here first if it is on another file system. */
  public static ExecutorCopy of(String path) throws IOException {
    if (!remote(path)) {
      return new ExecutorCopy(path, null);
    }
    SparkEnv env = SparkEnv.get();
    Configuration conf =
        env == null ? new Configuration() : SparkHadoopUtil.get().newConfiguration(env.conf());
    File folder =
        new File(env == null ? System.getProperty("java.io.tmpdir") : Utils.getLocalDir(env.conf()));
    File temporary = File.createTempFile("sealsync-", ".tsfile", folder);
    try {
      Path source = new Path(path);
      FileSystem fs = source.getFileSystem(conf);
      fs.copyToLocalFile(false, source, new Path(temporary.getAbsolutePath()), true);
    } catch (IOException | RuntimeException e) {
      temporary.delete();
      String why = e.getMessage() == null ? e.getClass().getSimpleName() : e.getMessage();
      throw new IOException("cannot copy " + path + " to the executor: " + why, e);
    }
    return new ExecutorCopy(temporary.getPath(), temporary);
  }

  /** The local path to open. */
  public String path() {
    return path;
  }

  @Override
  public void close() {
    if (temporary != null) {
      temporary.delete();
    }
  }
}
