package harness

import "context"

// AddNamespaces creates the named network namespaces with lo up; undo
// gets each deletion as soon as its namespace exists, so a failure
// halfway leaves nothing behind.
func AddNamespaces(ctx context.Context, undo *UndoStack, names ...string) error {
	for _, ns := range names {
		if _, err := Run(ctx, "ip", "netns", "add", ns); err != nil {
			return err
		}
		undo.Push("delete netns "+ns, func(ctx context.Context) error {
			_, err := Run(ctx, "ip", "netns", "del", ns)
			return err
		})
		if _, err := Run(ctx, "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	return nil
}
