package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions"
)

// TestRegistersEveryPackageLevelCollectorItLinks: a collector held in a
// package variable counts for every process that links its package, so
// the function binary serves every one its code links, through
// functions.StageCollectors, the list local serves too. A package that
// adds one and is not in that list fails here (as the replay desk's did:
// the reconcile stage counts applied replays, and the binary did not
// serve them).
func TestRegistersEveryPackageLevelCollectorItLinks(t *testing.T) {
	t.Parallel()
	declared := packageLevelMetrics(t)
	require.NotEmpty(t, declared)
	t.Logf("%d package-level collectors linked into the function binary", len(declared))

	reg := newRegistry()
	served := map[string]bool{}
	for _, c := range functions.StageCollectors() {
		var already prometheus.AlreadyRegisteredError
		require.ErrorAs(t, reg.Register(c), &already, "the function binary's registry holds every stage collector")
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			served[descName(d)] = true
		}
	}
	for name, where := range declared {
		require.True(t, served[name], "%s (%s) is linked into the function binary but not in functions.StageCollectors", name, where)
	}
}

// packageLevelMetrics finds, in the module's packages the function binary
// links, the package variables made by a prometheus constructor
// (prometheus.NewCounterVec(prometheus.CounterOpts{Name: "..."}) and its
// kin): metric name -> package.variable.
func packageLevelMetrics(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	found := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Dir string
			GoFiles         []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if !strings.HasPrefix(p.ImportPath, "github.com/aivedio/pipeline") {
			continue
		}
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, name), nil, 0)
			require.NoError(t, err)
			for _, decl := range f.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						if metric, ok := constructedMetric(t, v); ok {
							found[metric] = p.ImportPath + "." + vs.Names[i].Name
						}
					}
				}
			}
		}
	}
	return found
}

// constructedMetric reads the Name of a prometheus.NewCounter, ...Vec,
// Gauge, Histogram or Summary call.
func constructedMetric(t *testing.T, e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
		return "", false
	}
	switch strings.TrimSuffix(sel.Sel.Name, "Vec") {
	case "NewCounter", "NewGauge", "NewHistogram", "NewSummary":
	default:
		return "", false
	}
	if opts, ok := call.Args[0].(*ast.CompositeLit); ok {
		for _, el := range opts.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
				if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					return name, true
				}
			}
		}
	}
	t.Errorf("a package-level %s whose Name is not a string literal: give it one, or teach this test to read it", sel.Sel.Name)
	return "", false
}

// descName is the fully-qualified name in a Desc's String form.
func descName(d *prometheus.Desc) string {
	_, rest, _ := strings.Cut(d.String(), `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}
