package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasAnExample walks the command tree: every command that
// runs something (not a group that only lists its subcommands) shows an
// example in --help, and every xlane command line of every example names
// a command that exists, with flags it has and arguments it takes.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := newRoot(&env{})
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			walk(s)
		}
		if !c.Runnable() || c.Name() == "help" || c.Annotations[groupAnnotation] != "" {
			return
		}
		n++
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: no Example in --help", c.CommandPath())
			return
		}
		runs := 0
		for _, line := range strings.Split(c.Example, "\n") {
			for _, args := range xlaneCommands(line) {
				runs++
				if err := checkExample(args); err != nil {
					t.Errorf("%s: example %q: %v", c.CommandPath(), strings.TrimSpace(line), err)
				}
			}
		}
		if runs == 0 {
			t.Errorf("%s: its Example runs no xlane command", c.CommandPath())
		}
	}
	walk(root)
	if n < 50 {
		t.Errorf("walked %d runnable commands: the tree is not all there", n)
	}
}

// xlaneCommands are the xlane invocations of a shell line (pipelines
// split, redirections and comments dropped): each one's arguments.
func xlaneCommands(line string) [][]string {
	var out [][]string
	for _, seg := range strings.Split(line, "|") {
		words := shellWords(seg)
		if len(words) == 0 {
			continue
		}
		if words[0] == "source" && len(words) > 1 { // source <(xlane ...)
			words = words[1:]
			words[0] = strings.TrimPrefix(words[0], "<(")
		}
		if words[0] != "xlane" {
			continue
		}
		var args []string
		for _, w := range words[1:] {
			if strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || w == ")" {
				break
			}
			args = append(args, strings.TrimSuffix(w, ")"))
		}
		out = append(out, args)
	}
	return out
}

// shellWords splits s as a shell would for these examples: blanks
// separate, single and double quotes group, # starts a comment.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && !in:
			return words
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// checkExample finds the command args name in a fresh tree and parses its
// flags and arguments as Execute would, without running it.
func checkExample(args []string) error {
	root := newRoot(&env{})
	c, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := c.ParseFlags(rest); err != nil {
		return err
	}
	return c.ValidateArgs(c.Flags().Args())
}

// TestCompletion: xlane completion prints each shell's script.
func TestCompletion(t *testing.T) {
	for sh, want := range map[string]string{"bash": "__start_xlane", "zsh": "#compdef xlane", "fish": "complete -c xlane"} {
		var out, errb bytes.Buffer
		if code := Main([]string{"completion", sh}, &out, &errb); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("xlane completion %s: exit %d, %d bytes without %q; stderr %s", sh, code, out.Len(), want, errb.String())
		}
	}
}
