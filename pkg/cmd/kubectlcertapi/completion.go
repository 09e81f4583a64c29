package kubectlcertapi

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/kubectl/pkg/util/templates"

	"github.com/certapi/certapi/pkg/cmd/plugin"
)

// CompletionShells are the shells `completion` writes a script for, as cobra generates them, and
// CompletionKubectlPlugin, the executable kubectl runs to complete `kubectl certapi`.
var CompletionShells = []string{"bash", "zsh", "fish", "powershell", CompletionKubectlPlugin}

// CompletionKubectlPlugin is the argument of `completion` that prints kubectl_complete-certapi, the
// executable kubectl 1.26 and later run on PATH to complete the words after `kubectl certapi`.
const CompletionKubectlPlugin = "kubectl-plugin"

// binary is the plugin's executable, as kubectl finds it on PATH.
const binary = "kubectl-certapi"

func newCompletionCmd(root *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell|kubectl-plugin",
		Short: "Print the shell completion script for bash, zsh, fish or PowerShell, or kubectl's kubectl_complete-certapi",
		Long: templates.LongDesc(`
			Print the script that completes kubectl-certapi's commands, flags and ServingCertRequest names in
			the shell named, as cobra generates it. Load it where the shell loads completions.

			For "kubectl certapi <TAB>", kubectl 1.26 and later call an executable named
			kubectl_complete-certapi on PATH, and kubectl's own completion script (kubectl completion
			bash|zsh|fish|powershell) then completes the plugin too. The release archives and "make install"
			put one next to kubectl-certapi; "completion kubectl-plugin" prints it (it runs
			"kubectl-certapi __complete"), for a plugin installed with krew, which links only the plugin.`),
		Example: templates.Examples(`
			# Complete kubectl-certapi in bash, for this shell and every new one
			source <(kubectl certapi completion bash)
			kubectl certapi completion bash > ~/.local/share/bash-completion/completions/kubectl-certapi

			# zsh, fish and PowerShell
			kubectl certapi completion zsh > "${fpath[1]}/_kubectl-certapi"
			kubectl certapi completion fish > ~/.config/fish/completions/kubectl-certapi.fish
			kubectl certapi completion powershell | Out-String | Invoke-Expression

			# Let kubectl complete "kubectl certapi ..." (a directory on PATH; krew's is ~/.krew/bin)
			kubectl certapi completion kubectl-plugin > ~/.krew/bin/kubectl_complete-certapi
			chmod +x ~/.krew/bin/kubectl_complete-certapi`),
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: CompletionShells,
		RunE: func(cmd *cobra.Command, args []string) error {
			out, r := root.Out, cmd.Root()
			var err error
			switch args[0] {
			case "bash":
				err = r.GenBashCompletionV2(out, true)
			case "zsh":
				err = r.GenZshCompletion(out)
			case "fish":
				err = r.GenFishCompletion(out, true)
			case "powershell":
				err = r.GenPowerShellCompletionWithDesc(out)
			case CompletionKubectlPlugin:
				_, err = out.Write(plugin.KubectlCompletionScript(binary, "kubectl certapi"))
			}
			if err != nil {
				return fmt.Errorf("writing the %s completion script: %w", args[0], err)
			}
			return nil
		},
	}
	return cmd
}
