// Command xlane is the CLI of the xlane daemon.
package main

import (
	"os"

	"github.com/xlane-dev/xlane/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
