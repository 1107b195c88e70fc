package io.sealsync.tsfile;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The closed time ranges a chunk's deletions remove, merged into sorted disjoint ranges: a
 * point costs a binary search among them, not a test per deletion (a file may carry a hundred
 * thousand deletions, each covering every point of a series).
 */
final class TimeRanges {
  private static final TimeRanges NONE = new TimeRanges(new long[0], new long[0]);
  private final long[] starts;
  private final long[] ends;

  private TimeRanges(long[] starts, long[] ends) {
    this.starts = starts;
    this.ends = ends;
  }

  /** The ranges of the {@code hits} that reach a chunk whose header is at {@code chunkOffset}. */
  static TimeRanges of(List<TsFilePoints.Deletion> hits, long chunkOffset) {
    List<long[]> ranges = new ArrayList<>();
    for (TsFilePoints.Deletion d : hits) {
      if (d.below > chunkOffset && d.since <= d.until) {
        ranges.add(new long[] {d.since, d.until});
      }
    }
    if (ranges.isEmpty()) {
      return NONE;
    }
    ranges.sort((a, b) -> Long.compare(a[0], b[0]));
    long[] starts = new long[ranges.size()];
    long[] ends = new long[ranges.size()];
    int n = 0;
    for (long[] r : ranges) {
      // overlapping or adjacent (closed ranges of integers): one range
      if (n > 0 && (ends[n - 1] == Long.MAX_VALUE || r[0] <= ends[n - 1] + 1)) {
        ends[n - 1] = Math.max(ends[n - 1], r[1]);
      } else {
        starts[n] = r[0];
        ends[n] = r[1];
        n++;
      }
    }
    return new TimeRanges(Arrays.copyOf(starts, n), Arrays.copyOf(ends, n));
  }

  boolean isEmpty() {
    return starts.length == 0;
  }

  /** Whether {@code time} is in one of the ranges. */
  boolean covers(long time) {
    int at = Arrays.binarySearch(starts, time);
    if (at >= 0) {
      return true;
    }
    int before = -at - 2; // the last range starting below time
    return before >= 0 && time <= ends[before];
  }
}
