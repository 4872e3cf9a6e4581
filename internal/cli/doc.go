// Package cli is the xlane command line: cobra commands that call the
// daemon's API and print human tables, or JSON with -o json.
package cli
