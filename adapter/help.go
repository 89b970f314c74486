package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// helpFlags ask any command for its usage.
var helpFlags = []string{"-h", "-help", "--help"}

// answerHelp writes the usage of the command args name to out and reports
// true when args ask for help: "help", or -h/-help/--help anywhere. The
// usage is that of the words before the first flag ("quarantine list",
// "topics"); an unknown command is left to run, which refuses it.
func answerHelp(args []string, out io.Writer) bool {
	if len(args) > 0 && args[0] == "help" {
		args = append(args[1:], "--help")
	}
	if !slices.ContainsFunc(args, func(a string) bool { return slices.Contains(helpFlags, a) }) {
		return false
	}
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	text, ok := usageOf(words)
	if !ok {
		return false
	}
	fmt.Fprintln(out, text)
	return true
}

// usageOf is the usage of a command path: a command's own usage text when
// it has one, else the lines of the overview that name it.
func usageOf(words []string) (string, bool) {
	if len(words) == 0 {
		return usage, true
	}
	switch words[0] {
	case "replay":
		return replayUsage, true
	case "quarantine":
		return quarantineUsage, true
	case "tenants":
		return tenantsUsage, true
	case "capacity":
		return capacityUsage, true
	case "tasks":
		return tasksUsage, true
	case "pause", "resume":
		return pauseUsage, true
	case "topics":
		if len(words) > 1 && words[1] == "grant" {
			return grantUsage, true
		}
	}
	lines := []string{"usage:"}
	taking := false
	for _, line := range strings.Split(usage, "\n")[1:] {
		fields := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "   ") && taking: // continuation of the line above
			lines = append(lines, "        "+line)
		case len(fields) > 0 && fields[0] == words[0] && (len(words) < 2 || strings.HasPrefix(fields[1], words[1])):
			lines, taking = append(lines, "  adapter "+strings.TrimLeft(line, " ")), true
		default:
			taking = false
		}
	}
	if len(lines) == 1 {
		return "", false
	}
	return strings.Join(lines, "\n"), true
}
