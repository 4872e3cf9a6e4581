package vm

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed init.sh
var initScript []byte

// build extracts the package and writes the vmlinux and initramfs of img
// into dir (replacing what was there).
func build(k Kernel, deb, dir string, img *Image) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %w\n%s", deb, err, out)
	}
	out := filepath.Join(tmp, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	bz := filepath.Join(root, "boot", "vmlinuz-"+k.Release)
	if err := extractVmlinux(bz, filepath.Join(out, "vmlinux")); err != nil {
		return err
	}
	if err := buildInitramfs(root, k.Release, filepath.Join(out, "initrd.cpio")); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(out, dir)
}

// extractVmlinux writes the uncompressed ELF kernel inside a bzImage. The
// setup header says where the compressed payload is (boot protocol 2.08+);
// the build appends the uncompressed size as 4 bytes, which the
// decompressors would take for trailing garbage.
func extractVmlinux(bzImage, dst string) error {
	b, err := os.ReadFile(bzImage)
	if err != nil {
		return err
	}
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return fmt.Errorf("%s: not a bzImage", bzImage)
	}
	setupSects := int(b[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	off := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(b[0x248:]))
	n := int(binary.LittleEndian.Uint32(b[0x24c:]))
	if off+n > len(b) || n < 8 {
		return fmt.Errorf("%s: payload %d+%d out of range", bzImage, off, n)
	}
	payload := b[off : off+n-4]
	var cmd *exec.Cmd
	switch {
	case bytes.HasPrefix(payload, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		cmd = exec.Command("xz", "-dc", "--single-stream")
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		cmd = exec.Command("zstd", "-dcq")
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		cmd = exec.Command("gzip", "-dc")
	default:
		return fmt.Errorf("%s: unknown payload compression % x", bzImage, payload[:6])
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(payload), f, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("decompress %s with %s: %w\n%s", bzImage, cmd.Path, err, stderr.String())
	}
	head := make([]byte, 4)
	if _, err := f.ReadAt(head, 0); err != nil || string(head) != "\x7fELF" {
		return fmt.Errorf("%s: payload is not an ELF kernel", bzImage)
	}
	return nil
}

// buildInitramfs writes a newc cpio: busybox, the guest modules
// (decompressed, in load order, listed in /modules), and /init.
func buildInitramfs(root, release, dst string) error {
	modDir := filepath.Join(root, "lib", "modules", release)
	if out, err := exec.Command("depmod", "-b", root, release).CombinedOutput(); err != nil {
		return fmt.Errorf("depmod: %w\n%s", err, out)
	}
	order, err := moduleOrder(filepath.Join(modDir, "modules.dep"), guestModules)
	if err != nil {
		return err
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("busybox (apt-get install busybox-static): %w", err)
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	w := newCpio(f)
	for _, d := range []string{"bin", "dev", "proc", "sys", "host", "out", "lib", "lib/modules", "tmp"} {
		w.dir(d)
	}
	w.file("bin/busybox", 0o755, busybox)
	w.file("init", 0o755, initScript)
	var list []string
	for _, rel := range order {
		ko, err := readModule(filepath.Join(modDir, rel))
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(rel), ".xz"), ".zst"), ".ko")
		w.file("lib/modules/"+name+".ko", 0o644, ko)
		list = append(list, name)
	}
	w.file("modules", 0o644, []byte(strings.Join(list, "\n")+"\n"))
	return w.close()
}

// moduleOrder resolves want (module names, built-in ones skipped) and their
// dependencies from modules.dep into a load order.
func moduleOrder(depFile string, want []string) ([]string, error) {
	f, err := os.Open(depFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{}
	byName := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[modName(mod)] = mod
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(mod string) {
		if seen[mod] {
			return
		}
		seen[mod] = true
		// modules.dep lists the deepest dependency last.
		ds := deps[mod]
		for i := len(ds) - 1; i >= 0; i-- {
			visit(ds[i])
		}
		order = append(order, mod)
	}
	for _, name := range want {
		if mod, ok := byName[name]; ok {
			visit(mod)
		}
	}
	if len(order) == 0 {
		return nil, errors.New("modules.dep: none of the guest modules found")
	}
	return order, nil
}

// modName turns "kernel/net/9p/9pnet_virtio.ko.xz" into "9pnet_virtio".
func modName(path string) string {
	b := filepath.Base(path)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return strings.ReplaceAll(b, "-", "_")
}

func readModule(path string) ([]byte, error) {
	var cmd *exec.Cmd
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.xz"):
		cmd = exec.Command("xz", "-dc", path)
	case strings.HasSuffix(path, ".ko.zst"):
		cmd = exec.Command("zstd", "-dcq", path)
	case strings.HasSuffix(path, ".ko.gz"):
		cmd = exec.Command("gzip", "-dc", path)
	default:
		return nil, fmt.Errorf("module %s: unknown compression", path)
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", path, err)
	}
	return out, nil
}
