package datapath

// XDPErr says why the XDP modes cannot run here (their programs did not
// load on this kernel), or nil.
func (d *BPF) XDPErr() error { return d.objs.XDPErr() }
