#include "trace/PerfettoWriter.h"

#include <algorithm>

namespace openreg::trace {
namespace {

// Wire keys: (field number << 3) | wire type (0: varint, 2: length-delimited).
constexpr uint64_t key(uint64_t field, uint64_t wire) {
  return (field << 3) | wire;
}

constexpr uint64_t kTracePacket = key(1, 2);      // Trace.packet
constexpr uint64_t kTimestamp = key(8, 0);        // TracePacket.timestamp
constexpr uint64_t kSequenceId = key(10, 0);      // .trusted_packet_sequence_id
constexpr uint64_t kTrackEvent = key(11, 2);      // .track_event
constexpr uint64_t kSequenceFlags = key(13, 0);   // .sequence_flags
constexpr uint64_t kNeedsIncrementalState = 2;    // SEQ_NEEDS_INCREMENTAL_STATE
constexpr uint64_t kType = key(9, 0);             // TrackEvent.type
constexpr uint64_t kTrackUuid = key(11, 0);       // .track_uuid
constexpr uint64_t kNameIid = key(10, 0);         // .name_iid
constexpr uint64_t kCategoryIids = key(3, 0);     // .category_iids
constexpr uint64_t kAnnotation = key(4, 2);       // .debug_annotations
constexpr uint64_t kCounterValue = key(30, 0);    // .counter_value
constexpr uint64_t kAnnotationName = key(1, 0);   // DebugAnnotation.name_iid
constexpr uint64_t kIntValue = key(4, 0);         // .int_value
constexpr uint64_t kStringValueIid = key(17, 0);  // .string_value_iid

// Bytes of the varint of `v` (a negative int64 is its two's complement: 10).
size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* put_varint(char* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<char>(v);
  return out;
}

size_t field_size(uint64_t k, uint64_t v) {
  return varint_size(k) + varint_size(v);
}

char* put_field(char* out, uint64_t k, uint64_t v) {
  return put_varint(put_varint(out, k), v);
}

size_t annotation_size(const PerfettoArgument& a, uint64_t value) {
  return field_size(kAnnotationName, a.name_iid) +
         field_size(a.interned_string ? kStringValueIid : kIntValue, value);
}

}  // namespace

std::string perfetto_packets(const PerfettoPackets& rows,
                             const std::vector<PerfettoArgument>& arguments, uint64_t sequence_id) {
  const size_t per_packet = 40 + 16 * arguments.size();
  std::string out(rows.count * per_packet, '\0');
  size_t used = 0;
  for (size_t i = 0; i < rows.count; ++i) {
    const auto type = static_cast<PerfettoType>(rows.type[i]);
    const bool begin = type == PerfettoType::Begin;
    const bool named = type != PerfettoType::End && type != PerfettoType::Counter;
    const int64_t event = rows.event[i];
    // Sizes first: a length-delimited field's length precedes its bytes.
    size_t event_size = field_size(kType, rows.type[i]) + field_size(kTrackUuid, rows.track[i]);
    if (named) {
      event_size += field_size(kNameIid, rows.name_iid[i]);
    }
    if (begin) {
      event_size += field_size(kCategoryIids, rows.category_iid[i]);
      for (const auto& a : arguments) {
        const int64_t value = a.at(event);
        if (value >= 0) {
          const size_t size = annotation_size(a, value);
          event_size += varint_size(kAnnotation) + varint_size(size) + size;
        }
      }
    }
    if (type == PerfettoType::Counter) {
      event_size += field_size(kCounterValue, static_cast<uint64_t>(rows.counter[i]));
    }
    const size_t packet_size = field_size(kTimestamp, static_cast<uint64_t>(rows.timestamp[i])) +
                               field_size(kSequenceId, sequence_id) + varint_size(kTrackEvent) +
                               varint_size(event_size) + event_size +
                               field_size(kSequenceFlags, kNeedsIncrementalState);
    const size_t total = varint_size(kTracePacket) + varint_size(packet_size) + packet_size;
    if (used + total > out.size()) {
      out.resize(std::max(out.size() * 2, used + total));
    }
    char* p = out.data() + used;
    p = put_varint(put_varint(p, kTracePacket), packet_size);
    p = put_field(p, kTimestamp, static_cast<uint64_t>(rows.timestamp[i]));
    p = put_field(p, kSequenceId, sequence_id);
    p = put_varint(put_varint(p, kTrackEvent), event_size);
    p = put_field(p, kType, rows.type[i]);
    p = put_field(p, kTrackUuid, rows.track[i]);
    if (named) {
      p = put_field(p, kNameIid, rows.name_iid[i]);
    }
    if (begin) {
      p = put_field(p, kCategoryIids, rows.category_iid[i]);
      for (const auto& a : arguments) {
        const int64_t value = a.at(event);
        if (value >= 0) {
          p = put_varint(put_varint(p, kAnnotation), annotation_size(a, value));
          p = put_field(p, kAnnotationName, a.name_iid);
          p = put_field(p, a.interned_string ? kStringValueIid : kIntValue, value);
        }
      }
    }
    if (type == PerfettoType::Counter) {
      p = put_field(p, kCounterValue, static_cast<uint64_t>(rows.counter[i]));
    }
    p = put_field(p, kSequenceFlags, kNeedsIncrementalState);
    used = static_cast<size_t>(p - out.data());
  }
  out.resize(used);
  return out;
}

}  // namespace openreg::trace
