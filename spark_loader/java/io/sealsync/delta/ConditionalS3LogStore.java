package io.sealsync.delta;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's S3 log store, with each new version's file created by a conditional PUT.
 *
 * <p>A Delta commit is the creation of the next version's file in {@code _delta_log}, which must
 * fail if another writer created it first. Delta's {@link S3SingleDriverLogStore} checks that the
 * file is absent and then creates it, with a lock inside one JVM only: two loaders (two drivers)
 * committing the same version both pass the check and the second replaces the first's commit. S3
 * (since 2024), MinIO and s3proxy honour {@code If-None-Match: *} on a PUT, and Hadoop's S3A (3.5)
 * sends it for a file created with {@code fs.option.create.conditional.overwrite}: the second
 * writer's PUT is refused with 412. This store creates a version's file so, and turns the 412 into
 * the {@link FileAlreadyExistsException} Delta's transaction expects from a log store that lost
 * the race: Delta then checks the winner's commit against its own and commits at the next version,
 * or fails if they conflict. Overwrites (the checkpoint pointer) and reads are Delta's own.
 *
 * <p>Where the file system does not take the option (another S3 connector, conditional creates
 * turned off with {@code fs.s3a.create.conditional.enabled}), the write is Delta's own: one writer
 * per table.
 */
public class ConditionalS3LogStore extends S3SingleDriverLogStore {
  /** The S3A create option (Hadoop 3.5) that sends {@code If-None-Match: *}. */
  static final String CONDITIONAL = "fs.option.create.conditional.overwrite";

  public ConditionalS3LogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(
      Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) {
      super.write(path, actions, true, hadoopConf);
      return;
    }
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path target = fs.makeQualified(path);
    // No existence check first: the conditional PUT is the check, whoever wins the race.
    FSDataOutputStream stream;
    try {
      stream =
          (FSDataOutputStream)
              fs.createFile(target).overwrite(false).must(CONDITIONAL, true).build();
    } catch (IllegalArgumentException | UnsupportedOperationException e) {
      super.write(path, actions, false, hadoopConf); // no conditional create here
      return;
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      throw new FileAlreadyExistsException(target.toString());
    }
    try {
      while (actions.hasNext()) {
        stream.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (IOException | RuntimeException e) {
      try {
        stream.close();
      } catch (IOException ignored) {
        // the write's error is the one to report; a partial object is never visible on S3
      }
      throw e;
    }
    try {
      stream.close();
    } catch (IOException e) {
      if (preconditionFailed(e)) {
        throw new FileAlreadyExistsException(target.toString());
      }
      throw e;
    }
  }

  /** Whether the PUT was refused because the file exists (HTTP 412), as S3A reports it. */
  static boolean preconditionFailed(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      String name = t.getClass().getName();
      String text = String.valueOf(t.getMessage());
      if (name.endsWith("RemoteFileChangedException")
          || text.contains("Status Code: 412")
          || text.contains("PreconditionFailed")) {
        return true;
      }
      if (t.getCause() == t) {
        break;
      }
    }
    return false;
  }
}
