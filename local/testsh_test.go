package main

import (
	"bufio"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// nonRacePass is one `go test` line of test.sh built without -race: the
// tests it runs and the packages it runs them in.
type nonRacePass struct {
	line     string
	run      *regexp.Regexp
	packages []string
}

// covers reports whether the pass runs the test named name in dir (a path
// relative to the repository root, slash-separated).
func (p nonRacePass) covers(dir, name string) bool {
	if !p.run.MatchString(name) {
		return false
	}
	for _, pkg := range p.packages {
		pkg = strings.TrimPrefix(pkg, "./")
		if rest, ok := strings.CutSuffix(pkg, "..."); ok {
			rest = strings.TrimSuffix(rest, "/")
			if dir == rest || strings.HasPrefix(dir, rest+"/") {
				return true
			}
			continue
		}
		if strings.TrimSuffix(pkg, "/") == dir {
			return true
		}
	}
	return false
}

// nonRacePasses reads the `go test` lines of test.sh that build without -race.
func nonRacePasses(t *testing.T, path string) []nonRacePass {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var passes []nonRacePass
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "go test ") {
			continue
		}
		fields := strings.Fields(line)
		var pass nonRacePass
		race := false
		for i, field := range fields {
			switch {
			case field == "-race":
				race = true
			case field == "-run" && i+1 < len(fields):
				re, err := regexp.Compile(strings.Trim(fields[i+1], `'"`))
				if err != nil {
					t.Fatalf("test.sh: %q: -run: %v", line, err)
				}
				pass.run = re
			case strings.HasPrefix(field, "./"):
				pass.packages = append(pass.packages, field)
			}
		}
		if race {
			continue
		}
		if pass.run == nil {
			pass.run = regexp.MustCompile(".")
		}
		pass.line = line
		passes = append(passes, pass)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return passes
}

// builtWith reports whether a file with the build constraint expr is compiled
// on this platform with the race detector on or off.
func builtWith(expr constraint.Expr, race bool) bool {
	return expr.Eval(func(tag string) bool {
		switch tag {
		case "race":
			return race
		case runtime.GOOS, runtime.GOARCH, "unix", "gc", "cgo":
			return true
		}
		return strings.HasPrefix(tag, "go1.")
	})
}

// TestEveryNonRaceTestRunsInMakeTest holds test.sh to its comment: `make test`
// runs everything with -race, and the tests built only without it run in an
// earlier pass because their names match that pass's -run pattern. A new
// `!race` test whose name matches no such pass would never run in CI; a test
// behind a build tag CI never sets would not either.
func TestEveryNonRaceTestRunsInMakeTest(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	passes := nonRacePasses(t, filepath.Join(root, "local", "services", "test.sh"))
	if len(passes) == 0 {
		t.Fatal("test.sh has no go test line without -race; the !race tests would never run")
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		var expr constraint.Expr
		for _, group := range file.Comments {
			if group.Pos() > file.Package {
				break
			}
			for _, c := range group.List {
				if constraint.IsGoBuild(c.Text) {
					if expr, err = constraint.Parse(c.Text); err != nil {
						return err
					}
				}
			}
		}
		if expr == nil || builtWith(expr, true) {
			return nil // the -race pass runs it
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		builtWithoutRace := builtWith(expr, false)
		for _, decl := range file.Decls {
			name, ok := testFuncName(decl)
			if !ok {
				continue
			}
			checked++
			if !builtWithoutRace {
				t.Errorf("%s: %s is behind %q, which no pass of make test builds", path, name, expr)
				continue
			}
			covered := false
			for _, p := range passes {
				if p.covers(rel, name) {
					covered = true
					break
				}
			}
			if !covered {
				t.Errorf("%s: %s is built only without -race, and no go test line of local/services/test.sh without -race runs it; rename it to match one, or add a pass", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("found no test built only without -race; the walk is looking in the wrong place")
	}
	t.Logf("%d tests built only without -race, each run by one of %d passes", checked, len(passes))
}

// testFuncName returns the name of decl if `go test` runs it as a test.
func testFuncName(decl ast.Decl) (string, bool) {
	fn, ok := decl.(*ast.FuncDecl)
	if !ok || fn.Recv != nil || fn.Type.Params == nil || len(fn.Type.Params.List) != 1 {
		return "", false
	}
	name := fn.Name.Name
	rest, ok := strings.CutPrefix(name, "Test")
	if !ok || name == "TestMain" {
		return "", false
	}
	if rest != "" {
		if r, _ := utf8.DecodeRuneInString(rest); unicode.IsLower(r) {
			return "", false
		}
	}
	return name, true
}
