package plugin

import (
	"fmt"
	"strings"
)

// KubectlCompletionName is the name of the executable kubectl (1.26 and later) looks for on PATH to
// complete the words after a plugin's command: kubectl_complete-certapi for kubectl-certapi, as kubectl's
// plugin completion names it (https://kubernetes.io/docs/reference/kubectl/#plugin-completion).
func KubectlCompletionName(bin string) string {
	return strings.Replace(bin, "kubectl-", "kubectl_complete-", 1)
}

// KubectlCompletionScript is the content of the executable KubectlCompletionName(bin): a POSIX shell
// script that hands the words kubectl passes it to the plugin's own completion, cobra's hidden
// __complete command, whose output (one choice a line, then :directive) is what kubectl expects. command
// is how a user types the plugin, for the comment. The release archives and `make install` ship it next
// to the plugin.
func KubectlCompletionScript(bin, command string) []byte {
	return []byte(fmt.Sprintf(`#!/bin/sh
# kubectl runs this for "%s <TAB>" when it is on PATH (kubectl 1.26 and later; see
# https://kubernetes.io/docs/reference/kubectl/#plugin-completion), with the words typed after it.
exec %s __complete "$@"
`, command, bin))
}
