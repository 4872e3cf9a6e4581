package bpf

// The generated files are committed; `make generate` rebuilds them with
// Debian's clang-19 and `make test` fails if that changes anything.
//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf -type endpoint_key -type endpoint_val -type metrics_key -type metrics_val -type xl_reason -type xl_dir -type xl_ep_flags -type ct_key -type ct_val -type ct_dir -type ct_state -type ct_nat -type xl_config -type publish_key -type publish_val -type service_key -type service_val -type backend_key -type backend_val -type service_flags -type fw_field -type fw_kind -type fw_action -type fw_limits -type fw_gen -type fw_state -type fw_counter -type fw_event -type fw_ddos_flags -type fw_ddos -type fw_block4_key -type fw_block6_key -type fw_rate_key -type fw_rate_val -type mon_type -type mon_verdict -type mon_config -type mon_state -type mon_event tc ../../bpf/tc_endpoint.c
//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf -type neigh_key -type neigh_val xdp ../../bpf/xdp_endpoint.c
//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf uplink ../../bpf/xdp_uplink.c
//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf tcuplink ../../bpf/tc_uplink.c
//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf netkit ../../bpf/netkit_endpoint.c
//go:generate go tool bpf2go -cc clang-19 -no-strip -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -go-package bpf socklb ../../bpf/sock_lb.c
