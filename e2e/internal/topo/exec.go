package topo

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// runCmd runs a program in the test's own namespace.
func runCmd(name string, args ...string) error {
	_, err := runCmdOutput(name, args...)
	return err
}

func runCmdOutput(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func runIP(args ...string) error { return runCmd("ip", args...) }

func runIPOutput(args ...string) (string, error) { return runCmdOutput("ip", args...) }
