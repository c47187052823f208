#pragma once

// The packets of a Perfetto trace (TracePacket / TrackEvent protobuf messages)
// written from columns: openreg_lab/recording/perfetto.py prepares one row per
// packet (sorted, strings already interned) and this writes their bytes, the
// encoding loop numpy could only do with byte masks (Note [Perfetto's
// protobuf, written in columns] in perfetto.py).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace openreg::trace {

// TrackEvent.Type values of a packet row.
enum class PerfettoType : int64_t { Begin = 1, End = 2, Instant = 3, Counter = 4 };

// One debug annotation of the slices: its interned name and, per event row
// from `first` to `first + count`, its value (an int, or an interned string's
// id); a negative value or a row outside that range: absent.
struct PerfettoArgument {
  uint64_t name_iid;
  bool interned_string;
  const int64_t* values;  // values[row - first]
  int64_t first;
  int64_t count;

  int64_t at(int64_t row) const {
    return row >= first && row - first < count ? values[row - first] : -1;
  }
};

// One row per packet. `event` indexes the per-event argument columns; name and
// category ids of 0 are absent. Begins carry name, category and annotations;
// instants a name; counters a value; ends only their track.
struct PerfettoPackets {
  size_t count;
  const int64_t* timestamp;
  const int64_t* type;  // PerfettoType
  const int64_t* track;
  const int64_t* name_iid;
  const int64_t* category_iid;
  const int64_t* counter;
  const int64_t* event;
};

// The bytes of the rows as `Trace.packet` entries (field 1 of the Trace
// message), each packet on sequence `sequence_id` with
// SEQ_NEEDS_INCREMENTAL_STATE set.
std::string perfetto_packets(const PerfettoPackets& rows,
                             const std::vector<PerfettoArgument>& arguments, uint64_t sequence_id);

}  // namespace openreg::trace
