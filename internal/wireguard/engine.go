package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/xlane-dev/xlane/internal/model"
)

// Engines (Config.Engine, Status).
const (
	EngineAuto     = "auto"     // the kernel's where it has WireGuard, else embedded
	EngineKernel   = "kernel"   // the kernel's WireGuard (CONFIG_WIREGUARD)
	EngineEmbedded = "embedded" // wireguard-go in xlaned, on a TUN device
)

// ErrNoKernelWireGuard: the kernel cannot make a WireGuard link.
var ErrNoKernelWireGuard = errors.New("the kernel has no WireGuard (CONFIG_WIREGUARD off or its module not loadable)")

// engine is a WireGuard implementation behind the device: both are
// configured with wgctrl's types.
type engine interface {
	name() string
	configure(cfg wgtypes.Config) error
	device() (*wgtypes.Device, error)
	// close lets the device go: the embedded engine's goes with its
	// process; the kernel's outlives the daemon (as pins do).
	close()
	// adopted: the device was there before (a kernel device a former
	// xlaned left, with its sessions).
	adopted() bool
}

// openEngine makes (or adopts) the device name with the engine asked for.
func openEngine(want, name string, mtu int, log *slog.Logger) (engine, error) {
	if want == "" {
		want = EngineAuto
	}
	if want != EngineAuto && want != EngineKernel && want != EngineEmbedded {
		return nil, model.Fieldf("wireguard-engine", "%q: want auto, kernel or embedded", want)
	}
	if l, err := netlink.LinkByName(name); err == nil {
		switch l.Type() {
		case "wireguard":
			if want != EngineEmbedded {
				k, err := newKernelEngine(name) // a kernel device outlives xlaned: adopt it
				if k != nil {
					k.adopt = true
				}
				return k, err
			}
		case "tuntap", "tun":
		default:
			return nil, fmt.Errorf("device %s exists and is a %s, not xlane's WireGuard device: remove it", name, l.Type())
		}
		if err := netlink.LinkDel(l); err != nil {
			return nil, fmt.Errorf("remove stale %s: %w", name, err)
		}
	}
	if want != EngineEmbedded {
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}})
		if err == nil {
			return newKernelEngine(name)
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !strings.Contains(err.Error(), "not supported") {
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		if want == EngineKernel {
			return nil, model.Fieldf("wireguard-engine", "kernel: %v", ErrNoKernelWireGuard)
		}
		log.Info("encryption: the kernel has no WireGuard; running the embedded engine (wireguard-go on a TUN device)")
	}
	return newEmbeddedEngine(name, mtu, log)
}

type kernelEngine struct {
	dev   string
	c     *wgctrl.Client
	adopt bool
}

func newKernelEngine(name string) (*kernelEngine, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("wireguard netlink: %w", err)
	}
	return &kernelEngine{dev: name, c: c}, nil
}

func (k *kernelEngine) name() string                       { return EngineKernel }
func (k *kernelEngine) configure(cfg wgtypes.Config) error { return k.c.ConfigureDevice(k.dev, cfg) }
func (k *kernelEngine) device() (*wgtypes.Device, error)   { return k.c.Device(k.dev) }
func (k *kernelEngine) close()                             { k.c.Close() }
func (k *kernelEngine) adopted() bool                      { return k.adopt }

type embeddedEngine struct {
	dev  string
	wg   *device.Device
	done chan struct{}
}

func newEmbeddedEngine(name string, mtu int, log *slog.Logger) (*embeddedEngine, error) {
	t, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("create TUN device %s for the embedded WireGuard engine: %w", name, err)
	}
	logger := &device.Logger{
		Verbosef: func(format string, args ...any) { log.Debug("wireguard: " + fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { log.Warn("wireguard: " + fmt.Sprintf(format, args...)) },
	}
	// conn.NewDefaultBind batches UDP reads and writes (recvmmsg/
	// sendmmsg, UDP GSO/GRO where the kernel has them); the TUN device
	// reads and writes TSO/GRO super-packets (IFF_VNET_HDR offloads).
	wg := device.NewDevice(t, conn.NewDefaultBind(), logger)
	return &embeddedEngine{dev: name, wg: wg}, nil
}

func (e *embeddedEngine) name() string { return EngineEmbedded }

func (e *embeddedEngine) configure(cfg wgtypes.Config) error {
	if err := e.wg.IpcSet(marshalUAPI(cfg)); err != nil {
		return err
	}
	return e.wg.Up()
}

func (e *embeddedEngine) device() (*wgtypes.Device, error) {
	s, err := e.wg.IpcGet()
	if err != nil {
		return nil, err
	}
	return parseUAPI(e.dev, s)
}

func (e *embeddedEngine) close()        { e.wg.Close() }
func (e *embeddedEngine) adopted() bool { return false }
