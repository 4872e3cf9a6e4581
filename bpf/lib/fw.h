/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * fw.h - the firewall stage (what the hooks include): a stateful rule classifier whose per-packet
 * cost does not depend on the number of rules, and the uplink's DDoS
 * defence (prefix blocklist, per-source token buckets, early drop of
 * malformed headers). The algorithm is described in docs/firewall.md.
 *
 * Classification (bit-vector with aggregation): the daemon numbers the
 * rules of a set in priority order, bit 0 first, and compiles every field
 * into a lookup (exact hash, LPM trie, or an array indexed by value) that
 * yields a class; a class is a bitmap of FW_MAX_RULES bits, set for the
 * rules whose value set for that field contains the value, plus a summary
 * (bit i: word i not zero). The packet's matching rules are the AND of its
 * classes' bitmaps; the lowest set bit is the winner. The search ANDs the
 * summaries first and then only the words they leave, so its cost is
 * bounded by FW_WORDS whatever the number of rules, and is a handful of
 * words when rules are selective.
 *
 * Atomic updates: a rule set lives in five inner maps put into slot 0 or
 * 1 of the outer arrays; xlane_fw_state.active names the live slot and is
 * read once per packet, so a packet uses one generation throughout. The
 * daemon fills the idle slot, flips, and waits an RCU grace period before
 * it ever touches the old slot again (internal/firewall).
 */
#ifndef XLANE_FW_H
#define XLANE_FW_H

/*
 * The parts, one concern each:
 *   fw_maps.h     maps
 *   fw_l4.h       lib/l4.h's L4 facts as rule classes, the related flow
 *   fw_classify.h the classifier and the verdict
 *   fw_lin.h      the uplink's list for small sets, before the bitmaps
 *   reply.h       the TCP RST and ICMP unreachable of a reject
 *   ddos.h        the uplink's DDoS stage
 *   fw_stage.h    global functions and the stage as each hook calls it
 */
#include "fw_maps.h"
#include "fw_l4.h"
#include "fw_classify.h"
#include "fw_lin.h"
#include "reply.h"
#include "ddos.h"
#include "fw_stage.h"

#endif /* XLANE_FW_H */
