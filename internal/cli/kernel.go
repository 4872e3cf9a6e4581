package cli

import (
	"fmt"
	"io"

	"github.com/xlane-dev/xlane/internal/api"
)

// printFeatures shows the kernel features xlaned probed at start.
func printFeatures(w io.Writer, st *api.Status) {
	if len(st.Features) == 0 {
		return
	}
	fmt.Fprintf(w, "\nKERNEL %s FEATURE\tAVAILABLE\tSINCE\tUSED BY\tDETAIL\n", st.Kernel)
	for _, f := range st.Features {
		since := f.Since
		if since == "" {
			since = "-"
		}
		fmt.Fprintf(w, "%s\t%v\t%s\t%s\t%s\n", f.Name, f.Available, since, f.Uses, f.Detail)
	}
}
