// Package gen holds the benchmark's packet generator and meters: the BPF
// programs of xdpgen.c, compiled by bpf2go (the generated files are
// committed; `go generate ./bench/gen` rebuilds them with Debian's
// clang-19).
//
//   - xlb_gen: an XDP program run with BPF_PROG_RUN and
//     BPF_F_TEST_XDP_LIVE_FRAMES in the sending container; it writes a
//     whole 64-byte UDP frame from the gen_frame template (with
//     Flow.Flows > 1, the source port cycling over that many values, one
//     step per frame, per CPU: xlb_gen_seq) and returns
//     XDP_TX, which the kernel turns into a transmission out of the
//     container's eth0 (or XDP_PASS: the frame becomes an skb received
//     on eth0, and xlb_bounce, on eth0's tcx ingress, sends it out of
//     eth0 as an skb). Generate takes the batch (frames per flush);
//     AttachAnchor keeps the program in the XDP dispatcher so that the
//     calls do not wait for RCU grace periods.
//   - xlb_count: tcx ingress on the receiving container's eth0; counts the
//     generator's frames (routed ones and bad IPv4 checksums too) and
//     drops them.
//   - xlb_devmap_xmit, xlb_redirect_err: raw tracepoints that count XDP
//     frames dropped at a devmap flush (a full veth ring) and failed
//     redirects, by device and errno.
package gen

//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package gen -type xdp_err_key -type xlb_counter -type xlb_event xdpgen bpf/xdpgen.c
