"""How each coding agent is pointed at `qwen35 serve`: the same environment variables and config
files the README's "Coding agents" sections show (agents_test.py checks that the README still
names every one of them).

Each agent gets a fresh HOME (and XDG dirs inside it), so nothing of the machine's own
configuration is read or written, and everything that would reach a network other than the
server is off: telemetry, error reports, update checks, model catalogues, plugin downloads.
"""
import json
import os

MODEL_NAME = 'qwen35-tiny-kjv'


def _home_env(home):
    return {'HOME': home, 'XDG_CONFIG_HOME': os.path.join(home, '.config'),
            'XDG_DATA_HOME': os.path.join(home, '.local', 'share'),
            'XDG_CACHE_HOME': os.path.join(home, '.cache'),
            'XDG_STATE_HOME': os.path.join(home, '.local', 'state')}


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


class Agent:
    """name; bin (under node_modules/.bin); api; tool (a harmless tool of its own to force);
    setup(home, base_url) -> env for the run; argv(prompt) -> the command line after bin."""


class ClaudeCode(Agent):
    name, package, bin, api = 'claude-code', '@anthropic-ai/claude-code', 'claude', 'messages'
    tool = 'Read'  # read-only: safe to force with any arguments
    # The README's lines (base URL without /v1: Claude Code appends /v1/messages itself).
    ENV = {
        'ANTHROPIC_BASE_URL': '{base}',
        'ANTHROPIC_API_KEY': 'local',  # any value, unless serve runs with --api-key
        'ANTHROPIC_MODEL': MODEL_NAME,
        'ANTHROPIC_DEFAULT_HAIKU_MODEL': MODEL_NAME,  # its small side requests (titles, topics)
        'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC': '1',  # no telemetry, error reports, updates
    }

    def setup(self, home, base):
        return {k: v.format(base=base) for k, v in self.ENV.items()}

    def argv(self, prompt):
        return ['-p', prompt]


class Codex(Agent):
    name, package, bin, api = 'codex', '@openai/codex', 'codex', 'responses'
    tool = 'get_goal'  # no arguments, reads the session's goal: safe to force
    CONFIG = '''model = "{model}"
model_provider = "qwen35"
check_for_update_on_startup = false

[model_providers.qwen35]
name = "qwen35.cpp"
base_url = "{base}/v1"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false
'''

    def setup(self, home, base):
        _write(os.path.join(home, '.codex', 'config.toml'),
               self.CONFIG.format(model=MODEL_NAME, base=base))
        return {'CODEX_HOME': os.path.join(home, '.codex')}

    def argv(self, prompt):
        return ['exec', '--skip-git-repo-check', prompt]


class QwenCode(Agent):
    name, package, bin, api = 'qwen-code', '@qwen-code/qwen-code', 'qwen', 'chat'
    tool = 'read_file'  # read-only
    ENV = {
        'OPENAI_BASE_URL': '{base}/v1',
        'OPENAI_API_KEY': 'local',
        'OPENAI_MODEL': MODEL_NAME,
        'QWEN_TELEMETRY_ENABLED': '0',
        'QWEN_USAGE_STATISTICS_ENABLED': '0',
    }
    SETTINGS = {'general': {'enableAutoUpdate': False}}

    def setup(self, home, base):
        _write(os.path.join(home, '.qwen', 'settings.json'), json.dumps(self.SETTINGS, indent=2))
        return {k: v.format(base=base) for k, v in self.ENV.items()}

    def argv(self, prompt):
        return ['-p', prompt]


class OpenCode(Agent):
    name, package, bin, api = 'opencode', 'opencode-ai', 'opencode', 'chat'
    tool = 'read'  # read-only
    CONFIG = {
        '$schema': 'https://opencode.ai/config.json',
        'provider': {'qwen35': {
            'npm': '@ai-sdk/openai-compatible',
            'name': 'qwen35.cpp',
            'options': {'baseURL': '{base}/v1'},
            'models': {MODEL_NAME: {'name': MODEL_NAME}},
        }},
        'model': 'qwen35/' + MODEL_NAME,
        'autoupdate': False,
        'share': 'disabled',
    }
    ENV = {
        'OPENCODE_DISABLE_AUTOUPDATE': '1',
        'OPENCODE_DISABLE_MODELS_FETCH': '1',  # no models.dev catalogue
        'OPENCODE_DISABLE_DEFAULT_PLUGINS': '1',  # no plugin downloads
        'OPENCODE_DISABLE_LSP_DOWNLOAD': '1',
    }

    def setup(self, home, base):
        cfg = json.loads(json.dumps(self.CONFIG).replace('{base}', base))
        _write(os.path.join(home, '.config', 'opencode', 'opencode.json'), json.dumps(cfg, indent=2))
        return dict(self.ENV)

    def argv(self, prompt):
        return ['run', prompt]


AGENTS = [ClaudeCode(), Codex(), QwenCode(), OpenCode()]


def agent_env(agent, home, base):
    """The whole environment of one run: PATH and the locale from ours, nothing else of it."""
    env = {k: os.environ[k] for k in ('PATH', 'LANG', 'TERM') if k in os.environ}
    env.update(_home_env(home))
    env['NO_COLOR'] = '1'
    env.update(agent.setup(home, base))
    return env
