package function_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// assetsOwner is the one package that may hold SQL on the assets table
// (docs/design.md §4: one owner per table).
const assetsOwner = "shared/asset"

// assetsSQLAllowed are packages that still hold assets SQL: each is a
// known violation somebody is removing, and goes when it is gone.
var assetsSQLAllowed = map[string]string{}

// assetsSQLScanned are the trees the check reads. local/ is left out on
// purpose: its chaos and drive checkers are test drivers that read the
// table directly to check invariants behind the packages' backs.
var assetsSQLScanned = []string{"adapter", "functions", "shared"}

// assetsSQL matches a statement on the assets table, not on a table whose
// name only begins with assets.
var assetsSQL = regexp.MustCompile(`(?i)\b(FROM|INTO|UPDATE|JOIN)\s+assets\b`)

// TestAssetsSQLOwner: no package but shared/asset (and the allowed ones)
// has a string literal with SQL on the assets table in its non-test files.
func TestAssetsSQLOwner(t *testing.T) {
	t.Parallel()
	found := map[string][]string{} // package dir -> file:line
	for _, root := range assetsSQLScanned {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, line := range assetsSQLLines(fset, f) {
				dir := filepath.ToSlash(filepath.Dir(path))
				found[dir] = append(found[dir], filepath.ToSlash(path)+":"+line)
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Contains(t, found, assetsOwner, "the check saw the owner's own SQL")
	for dir, at := range found {
		if under(dir, assetsOwner) || slices.ContainsFunc(slices.Collect(maps.Keys(assetsSQLAllowed)), func(pkg string) bool { return under(dir, pkg) }) {
			continue
		}
		t.Errorf("%s holds SQL on the assets table (%s): call a shared/asset function instead", dir, strings.Join(at, ", "))
	}
	for allowed := range assetsSQLAllowed {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(found)), func(dir string) bool { return under(dir, allowed) }) {
			t.Logf("%s holds no assets SQL any more: delete it from assetsSQLAllowed", allowed)
		}
	}
}

// TestAssetsSQLLines: the check sees SQL in any string literal, raw or
// not, and neither comments nor tables that only begin with assets.
func TestAssetsSQLLines(t *testing.T) {
	t.Parallel()
	src := "package p\n" +
		"// the task's assets from assets of the tenant: prose, not SQL\n" +
		"const a = `SELECT asset_id\n\t\tFROM assets WHERE task_id = $1`\n" +
		"const b = \"UPDATE assets SET status = 'READY'\"\n" +
		"const c = `SELECT 1 FROM assets_archive JOIN assetsx USING (id)`\n" +
		"var d = f(`INSERT INTO assets (asset_id) VALUES ($1)`)\n" +
		"const e = `SELECT 1 FROM tasks t\n\tjoin assets a ON a.task_id = t.task_id`\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	require.NoError(t, err)
	require.Equal(t, []string{"4", "5", "7", "9"}, assetsSQLLines(fset, f))
}

// assetsSQLLines are the lines of f where one of its string literals
// holds SQL on the assets table.
func assetsSQLLines(fset *token.FileSet, f *ast.File) []string {
	var lines []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			for _, m := range assetsSQL.FindAllStringIndex(lit.Value, -1) {
				line := fset.Position(lit.Pos()).Line + strings.Count(lit.Value[:m[0]], "\n")
				lines = append(lines, strconv.Itoa(line))
			}
		}
		return true
	})
	return lines
}

// under reports whether dir is pkg or a directory under it.
func under(dir, pkg string) bool { return dir == pkg || strings.HasPrefix(dir, pkg+"/") }
