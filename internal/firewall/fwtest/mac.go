package fwtest

import "net"

func parseMAC(s string) (net.HardwareAddr, error) { return net.ParseMAC(s) }
