// Command podserver is the container of the Kubernetes cluster test's pods
// (test/e2e/k8s_kubelet_test.go), built static and imported as a local
// image (no registry is reachable):
//
//	:8080  writes -name and a newline, then echoes lines back (the
//	       protocol of the e2e tests' name servers: dialVIP reads the name)
//	:9090  reads until the client half-closes, then writes the byte count
//	       and the SHA-256 of what it read ("N HEX\n")
//
// Both on every address of the pod, IPv4 and IPv6. Exits on SIGTERM.
package main

import (
	"bufio"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	name := flag.String("name", "", "the name :8080 answers with")
	flag.Parse()
	serve(":8080", func(c net.Conn) {
		fmt.Fprintln(c, *name)
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := c.Write([]byte(l)); err != nil {
				return
			}
		}
	})
	serve(":9090", func(c net.Conn) {
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil {
			log.Printf("sink %s: %v", c.RemoteAddr(), err)
			return
		}
		fmt.Fprintf(c, "%d %x\n", n, h.Sum(nil))
	})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

func serve(addr string, handle func(net.Conn)) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				log.Fatal(err)
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
