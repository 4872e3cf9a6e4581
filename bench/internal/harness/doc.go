// Package harness is what every benchmark under bench/ runs on, so each
// main only says what it measures:
//
//   - Main (harness.go): the run's lifetime: signals cancel the run but not
//     its teardown (CancelOnSignal), a temp dir, the cleanup stack run on
//     the way out, the exit code;
//   - UndoStack (undo.go): teardown steps run last-in first-out, past
//     failures;
//   - Run, RunInput, RunAll, NSExec (exec.go): commands, in a network
//     namespace when asked (nsenter --net, so bpffs stays visible), logged
//     with -v (Verbose); Proc and WaitFor (proc.go): long-running children
//     stopped by pid;
//   - Pair, LinkMAC, Listening (pair.go) and Endpoint (endpoint.go): the two
//     containers of a test network and what the xlane CLI says of them;
//   - RunFlags, QuickDefaults, ParseLevels, ParseChoices (flags.go): the
//     flags the benchmarks share; WriteResults, PrintResults, RunHeader
//     (results.go): the results directory, the report's common head;
//   - AddNamespaces (netns.go): namespaces with lo up, deleted on teardown;
//   - StartXlaned, Xlane (xlaned.go): an xlaned in a namespace, ready, and
//     its CLI; Preflight (preflight.go): root, tools, bpffs;
//   - Machine, KernelRelease, CPUModel, BuildBinaries, PrepareRun, LoadAvg, RandomHex
//     (machine.go): where the run happened, the binaries under test, unique
//     names.
//
// Namespaces are named by the caller (a random prefix from RandomHex), so
// concurrent runs and leftovers of a killed run do not collide.
package harness
