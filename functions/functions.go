// Package functions maps a stage name to the function that serves it. The
// root entry (function.go) and `go run ./local` use it to build the stage
// named by the STAGE variable; each stage lives in its own package below.
package functions

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
)

// Deps are what a stage may need to run. Fields are added as stages land.
type Deps struct {
	Logger *slog.Logger
}

// Constructor builds one stage's function.
type Constructor func(ctx context.Context, deps Deps) (*stage.Function, error)

// constructors holds the stages whose handlers exist. A catalog stage
// missing here is refused at start-up with a clear error instead of being
// served by a placeholder.
var constructors = map[string]Constructor{}

// New builds the function of the named stage.
func New(ctx context.Context, name string, deps Deps) (*stage.Function, error) {
	if !slices.Contains(catalog.Stages(), name) {
		return nil, fmt.Errorf("unknown stage %q: set STAGE to one of %s", name, strings.Join(catalog.Stages(), ", "))
	}
	build, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("stage %q has no handler in this build yet", name)
	}
	return build(ctx, deps)
}
