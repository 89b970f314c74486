package replay_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// statusWord is a replay or quarantine status as a whole Go string or as
// an SQL literal inside one.
var statusWord = regexp.MustCompile(`^(DRY_RUN|APPROVED|EXECUTED|REJECTED|QUARANTINED|REPLAYED|DISCARDED)$|'(DRY_RUN|APPROVED|EXECUTED|REJECTED|QUARANTINED|REPLAYED|DISCARDED)'`)

// The statuses are written once, where they are declared: code compares
// with the constants and SQL takes them as parameters, so a status cannot
// be misspelt in one place.
func TestStatusesAreWrittenOnce(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{".", "../quarantine"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				if d, ok := n.(*ast.GenDecl); ok && d.Tok == token.CONST {
					return false // the declarations
				}
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					require.False(t, statusWord.MatchString(s), "%s: status written as a literal: %s", name, lit.Value)
				}
				return true
			})
		}
	}
}
