package function_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/aivedio/pipeline"

// layerRule forbids every package under from to depend, directly or
// through others, on any package under one of to.
type layerRule struct {
	from string
	to   []string
	why  string
}

// layerRules are the import directions of docs/design.md §1: local/ and the
// root entry wire things together and may import anything.
var layerRules = []layerRule{
	{"adapter", []string{"functions", "local"}, "the adapter delivers CloudEvents to whatever handler or URL it is given; it links no stage"},
	{"shared", []string{"functions", "adapter", "local"}, "shared/ is what functions/ and adapter/ share, and imports neither"},
	{"functions", []string{"adapter", "local"}, "handlers never talk to the broker"},
}

// allowedEdges are direct imports the rules let through for now: each is
// a known violation somebody is removing, and goes when it is gone.
var allowedEdges = map[[2]string]string{}

// TestLayering: no package depends on one its layer must not, but through
// an allowed edge. A violation names the chain of imports that makes it.
func TestLayering(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	imports := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if within(p.ImportPath, module) {
			imports[p.ImportPath] = p.Imports
		}
	}
	require.Contains(t, imports, module+"/adapter", "go list saw the module")
	for _, v := range layerViolations(imports, layerRules, allowedEdges) {
		t.Error(v)
	}
	for edge := range allowedEdges {
		if !slices.Contains(imports[edge[0]], edge[1]) {
			t.Logf("allowed edge %s -> %s is no longer taken: delete it from allowedEdges", edge[0], edge[1])
		}
	}
}

// TestLayerViolationsFollowChains: the check sees an arrow through other
// packages, names the chain, and lets an allowed edge through only where
// the chain takes it.
func TestLayerViolationsFollowChains(t *testing.T) {
	t.Parallel()
	imports := map[string][]string{
		module + "/adapter":          {module + "/shared/replay"},
		module + "/shared/replay":    {module + "/shared/rules", "fmt"},
		module + "/shared/rules":     {module + "/functions/submit"},
		module + "/functions/x":      {module + "/functions/y"},
		module + "/functions/y":      {module + "/adapter/source"},
		module + "/functions/submit": nil,
		module + "/adapter/source":   nil,
	}
	allowed := map[[2]string]string{{module + "/functions/y", module + "/adapter/source"}: "test"}
	got := layerViolations(imports, layerRules, allowed)
	require.Equal(t, []string{
		"adapter -> shared/replay -> shared/rules -> functions/submit: the adapter delivers CloudEvents to whatever handler or URL it is given; it links no stage",
		"shared/replay -> shared/rules -> functions/submit: shared/ is what functions/ and adapter/ share, and imports neither",
		"shared/rules -> functions/submit: shared/ is what functions/ and adapter/ share, and imports neither",
	}, got)
	require.Len(t, layerViolations(imports, layerRules, nil), len(got)+2, "without the allowed edge functions/x and functions/y break the rule")
}

// layerViolations walks the imports of every package a rule covers and
// returns, sorted, one line per package that reaches a forbidden one: the
// shortest chain to the first forbidden package found.
func layerViolations(imports map[string][]string, rules []layerRule, allowed map[[2]string]string) []string {
	var out []string
	for _, r := range rules {
		for pkg := range imports {
			if !within(pkg, module+"/"+r.from) {
				continue
			}
			if chain := forbiddenChain(imports, pkg, r.to, allowed); chain != nil {
				for i, p := range chain {
					chain[i] = strings.TrimPrefix(p, module+"/")
				}
				out = append(out, strings.Join(chain, " -> ")+": "+r.why)
			}
		}
	}
	slices.Sort(out)
	return out
}

// forbiddenChain is the shortest chain of imports from pkg to a package
// under one of to, skipping allowed edges; nil when there is none.
func forbiddenChain(imports map[string][]string, pkg string, to []string, allowed map[[2]string]string) []string {
	parent := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, dep := range imports[p] {
			if _, seen := parent[dep]; seen || !within(dep, module) {
				continue
			}
			if _, ok := allowed[[2]string{p, dep}]; ok {
				continue
			}
			parent[dep] = p
			if slices.ContainsFunc(to, func(layer string) bool { return within(dep, module+"/"+layer) }) {
				var chain []string
				for at := dep; at != ""; at = parent[at] {
					chain = append(chain, at)
				}
				slices.Reverse(chain)
				return chain
			}
			queue = append(queue, dep)
		}
	}
	return nil
}

// within reports whether pkg is root or a package under it.
func within(pkg, root string) bool {
	return pkg == root || strings.HasPrefix(pkg, root+"/")
}
