// Package rules is the firewall's rule model as users write it (YAML, or
// JSON through the API), with parsing, diffs and the iptables-save import.
// It has no kernel dependencies: the CLI uses it; internal/firewall
// validates and compiles it.
package rules
