package config

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/kelseyhightower/envconfig"
)

// HelpRequested reports whether a command's arguments ask for its usage
// (-h, -help or --help).
func HelpRequested(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" })
}

// PrintUsage writes a command's usage line and then every environment
// variable cfg reads, with its type, default, whether it is required and
// what it is for: the answer to -h of a command configured by environment.
func PrintUsage(w io.Writer, usage string, cfg any) error {
	if _, err := fmt.Fprintf(w, "%s\n\n", usage); err != nil {
		return err
	}
	tabs := tabwriter.NewWriter(w, 1, 0, 4, ' ', 0)
	if err := envconfig.Usagef("", cfg, tabs, envconfig.DefaultTableFormat); err != nil {
		return err
	}
	return tabs.Flush()
}
