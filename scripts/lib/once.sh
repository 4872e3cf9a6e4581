# Sourced by the scripts that build a tool once per machine into a cache
# outside the work tree (k8s-bins.sh, k8s-coredns.sh, hubble-bins.sh, kwok-bins.sh,
# cilium-bins.sh, cnp-conformance.sh).
#
# once DIR OUT CHECK...: when the command CHECK... succeeds (the build is
# there), prints OUT and exits the script; otherwise takes DIR/.lock, so
# that a second caller waits for the first build, and checks again. It
# returns holding the lock (fd 9) when the caller has to build.
once() {
	local dir=$1 out=$2
	shift 2
	if "$@"; then
		echo "$out"
		exit 0
	fi
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock 9
	if "$@"; then
		echo "$out"
		exit 0
	fi
}
