package vm

import (
	"fmt"
	"io"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as an
// initramfs. Only directories and regular files, owned by root.
type cpioWriter struct {
	w    io.Writer
	ino  int
	err  error
	size int64
}

func newCpio(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, nil) }

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.entry(name, 0o100000|perm, data)
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	if c.err != nil {
		return
	}
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.ino++
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.size += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.size % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// close writes the trailer.
func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}
