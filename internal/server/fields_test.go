package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
)

// requestTypes are the bodies the API decodes: an error's field names one
// of their JSON keys.
var requestTypes = []any{
	api.NetworkCreate{}, api.NetworkUpdate{}, api.EndpointAdd{}, api.NodeAdd{}, api.NodeUpdate{}, api.PortsUpdate{},
	api.ServiceCreate{}, api.ServiceUpdate{}, api.ServiceApply{}, api.AttachmentAdd{}, api.AttachmentGC{},
	api.FirewallApply{}, api.FirewallBlock{}, api.AccelEnable{}, api.ProxyRedirect{}, api.TraceRequest{},
	rules.Rule{}, rules.DDoS{}, model.BGPPeer{}, model.LBPool{},
}

// notRequestKeys are field names of errors about something other than a
// request body, and where they come from.
var notRequestKeys = map[string]string{
	"body":               "the request body itself (not JSON, too large)",
	"limit":              "a query parameter (?limit=)",
	"file":               "a firewall rule file (xlane fw apply -f), parsed before any request",
	"prefix":             "Firewall.ApplyOwned's owned prefix (an in-process caller: Kubernetes mode)",
	"node-name":          "xlaned --node-name",
	"cluster-cidr":       "xlaned --cluster-cidr",
	"overlay-encap":      "xlaned --overlay-encap",
	"routing":            "xlaned --routing",
	"encryption":         "xlaned --encryption",
	"encryption-strict":  "xlaned --encryption-strict",
	"encryption-node":    "xlaned --encryption-node",
	"nat-ports":          "xlaned --nat-ports",
	"nodes":              "xlaned --nodes (a file of node records)",
	"service-no-backend": "xlaned --service-no-backend",
}

func jsonKeys(t reflect.Type, keys map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
		jsonKeys(f.Type, keys)
	}
}

// TestFieldNamesAreJSONKeys walks the validators' sources for
// model.Fieldf("NAME", ...) and wants NAME to be a JSON key of a request
// (the node API said pod-cidr where the key is pod_cidrs), or one of
// notRequestKeys.
func TestFieldNamesAreJSONKeys(t *testing.T) {
	keys := map[string]bool{}
	for _, v := range requestTypes {
		jsonKeys(reflect.TypeOf(v), keys)
	}
	fset := token.NewFileSet()
	checked := 0
	// The core and every feature package that validates a request (a
	// feature moved out of internal/daemon is added here with it).
	for _, dir := range []string{"../daemon", "../model", "../ipam", "../netconf", "../server", "../firewall", "../firewall/rules", "../k8s",
		"../api", "../cluster", "../services", "../firewall/control", "../accelproxy"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				var name string
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if name != "Fieldf" || !ok || lit.Kind != token.STRING {
					return true
				}
				field, _ := strconv.Unquote(lit.Value)
				checked++
				if !keys[field] && notRequestKeys[field] == "" {
					t.Errorf("%s: error field %q is no request's JSON key", fset.Position(lit.Pos()), field)
				}
				return true
			})
		}
	}
	if checked < 100 {
		t.Fatalf("found %d Fieldf calls: the walk misses the validators", checked)
	}
}
