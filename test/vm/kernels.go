package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Kernel is one leg of the matrix: a Debian kernel package pinned by exact
// version and hash.
type Kernel struct {
	Name    string // leg name: "6.1", "6.12"
	Package string // Debian binary package
	Version string // exact package version
	SHA256  string // of the .deb as Debian's archive serves it
	Release string // uname -r, the directory under /lib/modules
	Why     string // what this leg covers
	// Require lists the kernel features (internal/features) and datapath
	// modes this leg must offer: vmexec exports them to the guest as
	// XLANE_REQUIRE_FEATURES and XLANE_REQUIRE_MODES, and a test that finds
	// one missing fails instead of skipping.
	RequireFeatures []string
	RequireModes    []string
}

// Kernels is the matrix. Debian keeps only the newest build of a package in
// its archive: when a security update replaces one of these versions,
// Fetch fails and names the version on offer; update Version, SHA256 and
// Release here (apt-cache show PACKAGE prints them).
var Kernels = []Kernel{
	{
		Name:    "6.1",
		Package: "linux-image-6.1.0-50-amd64",
		Version: "6.1.176-1",
		SHA256:  "7b5597492a0a65aee61985a492e6bcc3f2cde830072a0e3b3d8c7e1b90279bd3",
		Release: "6.1.0-50-amd64",
		Why:     "oldest supported: no tcx, no netkit (legacy tc fallback)",
		RequireFeatures: []string{"tc-clsact", "xdp-link", "xdp-frags", "fib-skip-neigh",
			"big-tcp-ipv6", "sockmap"},
		RequireModes: []string{"tc", "kernel", "xdp", "xdp-generic"},
	},
	{
		Name:    "6.12",
		Package: "linux-image-6.12.117+deb12-amd64",
		Version: "6.12.117-1~deb12u1",
		SHA256:  "803d36a7cda13355ae8152122470288b2636f19f1cb58162dd9d8b408af9b1b4",
		Release: "6.12.117+deb12-amd64",
		Why:     "tcx and netkit",
		RequireFeatures: []string{"tcx", "tc-clsact", "netkit", "xdp-link", "xdp-frags",
			"fib-skip-neigh", "big-tcp-ipv6", "big-tcp-ipv4", "sockmap", "sockmap-link"},
		RequireModes: []string{"tc", "kernel", "xdp", "xdp-generic"},
	},
}

// KernelByName finds a leg of the matrix.
func KernelByName(name string) (Kernel, error) {
	var names []string
	for _, k := range Kernels {
		if k.Name == name {
			return k, nil
		}
		names = append(names, k.Name)
	}
	return Kernel{}, fmt.Errorf("kernel %q: not in the matrix (have %s)", name, strings.Join(names, ", "))
}

// DefaultCacheDir is where kernels and images are kept unless
// XLANE_VM_CACHE says otherwise: outside the work tree, so every clone on
// the machine shares it.
func DefaultCacheDir() string {
	if d := os.Getenv("XLANE_VM_CACHE"); d != "" {
		return d
	}
	return "/var/cache/xlane/vm"
}

// Image is a fetched kernel ready to boot.
type Image struct {
	Kernel  Kernel
	Vmlinux string // uncompressed ELF, booted through its PVH entry
	Initrd  string // busybox, modules, init
}

// modules the guest loads (with their dependencies), in this order: the
// 9p transport and filesystem for the host tree, and what the tests need
// that Debian builds as modules (netlink families vishvananda/netlink opens
// for every handle, nf_tables for the firewall's differential test against
// nftables, with the crc32c its libcrc32c asks the crypto API for at
// load, which no modprobe answers in the guest; nft_ct and with it
// nf_conntrack for kernel mode's unsolicited-traffic guard, whose
// "ct state" rules nft cannot add without it; pktgen for the netkit
// benchmark; bridge and vxlan for the cross-node tests, wireguard for
// their encryption). Missing ones are
// skipped (built in).
var guestModules = []string{
	"virtio_pci", "9pnet_virtio", "9p",
	"veth", "sch_ingress", "cls_bpf", "act_bpf",
	"xfrm_user", "nfnetlink", "crc32c_generic", "nf_tables", "nft_ct", "pktgen",
	"virtio_net",      // for guests given a NIC (Cmd.QEMUArgs): the VM endpoint test
	"bridge", "vxlan", // the cross-node tests: an underlay bridge, the overlay device
	"wireguard", // encryption between nodes: the kernel engine (TestEncryptionWireGuard)
}

// Fetch returns the bootable image of k, downloading and building what the
// cache lacks. The .deb is checked against k.SHA256 every time; derived
// files live in a directory named after that hash.
func Fetch(k Kernel, cacheDir string) (*Image, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("kernel matrix: only amd64 hosts are supported (this is %s)", runtime.GOARCH)
	}
	debDir := filepath.Join(cacheDir, "deb")
	if err := os.MkdirAll(debDir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache dir: %w", err)
	}
	deb, err := fetchDeb(k, debDir)
	if err != nil {
		return nil, err
	}
	// One directory per image version: runs of two harness versions (two
	// checkouts) sharing the cache do not rebuild each other's images.
	dir := filepath.Join(cacheDir, "img", k.SHA256[:16]+"-v"+strings.Fields(imageVersion)[1])
	img := &Image{Kernel: k, Vmlinux: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initrd.cpio")}
	stamp := filepath.Join(dir, "ready")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == imageVersion {
		return img, nil
	}
	if err := build(k, deb, dir, img); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	if err := os.WriteFile(stamp, []byte(imageVersion), 0o644); err != nil {
		return nil, err
	}
	return img, nil
}

// imageVersion changes when the way images are built changes, so cached
// images from an older harness are rebuilt.
const imageVersion = "xlane-vm-image 10\n"

func fetchDeb(k Kernel, debDir string) (string, error) {
	arch := "amd64"
	name := fmt.Sprintf("%s_%s_%s.deb", k.Package, strings.ReplaceAll(k.Version, ":", "%3a"), arch)
	path := filepath.Join(debDir, name)
	if err := checkSHA256(path, k.SHA256); err == nil {
		return path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		os.Remove(path)
	}
	// apt-get verifies the download against the archive's signed index;
	// the pinned hash then makes sure it is the very build the matrix was
	// measured on.
	cmd := exec.Command("apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", k.Package+"="+k.Version)
	cmd.Dir = debDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if avail, _ := exec.Command("apt-cache", "policy", k.Package).Output(); len(avail) > 0 {
			msg += "\napt-cache policy " + k.Package + ":\n" + string(avail)
		}
		return "", fmt.Errorf("download %s=%s (pinned in test/vm/kernels.go; if Debian replaced it, pin the version on offer and its SHA256 from apt-cache show): %w\n%s", k.Package, k.Version, err, msg)
	}
	if err := checkSHA256(path, k.SHA256); err != nil {
		os.Remove(path)
		return "", fmt.Errorf("verify %s: %w", name, err)
	}
	return path, nil
}

func checkSHA256(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("sha256 %s, want %s", got, want)
	}
	return nil
}
