package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// WriteResults writes files (name -> content) into dir and says where.
func WriteResults(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var names []string
	var errs []error
	for name, b := range files {
		p := filepath.Join(dir, name)
		errs = append(errs, os.WriteFile(p, b, 0o644))
		names = append(names, p)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	sort.Strings(names)
	fmt.Printf("\nresults: %s\n", strings.Join(names, ", "))
	return nil
}
