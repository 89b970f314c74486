package function_test

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryRaceFreeTestRunsInMakeTest: a test file built only without
// -race (//go:build !race: the RocketMQ client's own data races) is left
// out of `make test`'s -race pass, so its tests run only if a non-race
// pass of local/services/test.sh names them, by its -run pattern and its
// packages. A test that no pass names would never run; this finds it.
func TestEveryRaceFreeTestRunsInMakeTest(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("local/services/test.sh")
	require.NoError(t, err)
	type pass struct {
		run  *regexp.Regexp
		pkgs []string
	}
	var passes []pass
	line := regexp.MustCompile(`(?m)^go test (.*)$`)
	runFlag := regexp.MustCompile(`-run '([^']+)'`)
	for _, m := range line.FindAllStringSubmatch(string(script), -1) {
		args := m[1]
		if strings.Contains(args, "-race") {
			continue
		}
		r := runFlag.FindStringSubmatch(args)
		require.NotNil(t, r, "a pass without -race and without -run: %s", args)
		p := pass{run: regexp.MustCompile(r[1])}
		for _, f := range strings.Fields(args) {
			if strings.HasPrefix(f, "./") {
				p.pkgs = append(p.pkgs, f)
			}
		}
		passes = append(passes, p)
	}
	require.NotEmpty(t, passes, "test.sh has no pass without -race")

	covered := func(dir, name string) bool {
		for _, p := range passes {
			if !p.run.MatchString(name) {
				continue
			}
			for _, pkg := range p.pkgs {
				pkg = strings.TrimSuffix(strings.TrimPrefix(pkg, "./"), "/")
				if rest, ok := strings.CutSuffix(pkg, "/..."); ok {
					if dir == rest || strings.HasPrefix(dir, rest+"/") {
						return true
					}
				} else if dir == pkg {
					return true
				}
			}
		}
		return false
	}

	var files, tests int
	var missed []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if !onlyWithoutRace(f) {
			return nil
		}
		files++
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			tests++
			if !covered(filepath.Dir(path), fn.Name.Name) {
				missed = append(missed, path+": "+fn.Name.Name)
			}
		}
		return nil
	})
	require.NoError(t, err)
	t.Logf("%d tests in %d files built without -race, each named by a pass of test.sh", tests, files)
	require.Positive(t, tests)
	require.Empty(t, missed, "built only without -race, and no pass of local/services/test.sh without -race runs them: rename them TestRealBroker* or TestProxyRestart*, or add a pass")
}

// onlyWithoutRace reports a file whose build constraint excludes -race.
func onlyWithoutRace(f *ast.File) bool {
	for _, group := range f.Comments {
		if group.Pos() > f.Package {
			break
		}
		for _, c := range group.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return false
			}
			return !expr.Eval(func(tag string) bool { return tag == "race" || tag == "linux" || tag == "amd64" })
		}
	}
	return false
}
