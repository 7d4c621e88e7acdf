"""How each coding agent is pointed at `qwen35 serve`: the same environment variables and config
files the README's "Coding agents" sections show (agents_test.py checks that the README still
names every one of them).

Each agent gets a fresh HOME (and XDG dirs inside it), so nothing of the machine's own
configuration is read or written, and everything that would reach a network other than the
server is off: telemetry, error reports, update checks, model catalogues, plugin downloads.
"""
import json
import os
import re

MODEL_NAME = 'qwen35-tiny-kjv'
README_BASE = 'http://127.0.0.1:8080'  # the server the README's examples point at


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
    setup(home, base_url) -> env for the run; argv(prompt) -> the command line after bin;
    readme(section) -> what the README's section for it lacks of those settings (a list)."""
    ENV = {}

    def readme(self, section):
        missing = []
        for k, v in self.ENV.items():
            if not re.search(r'(^|\s)%s=%s(\s|$)' % (re.escape(k), re.escape(
                    v.format(base=README_BASE))), section, re.M):
                missing.append('%s=%s' % (k, v.format(base=README_BASE)))
        return missing


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

    def readme(self, section):
        want = self.CONFIG.format(model=MODEL_NAME, base=README_BASE)
        return [] if want in section else ['config.toml:\n' + want]


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
    # Auto-memory sends a second long prompt after every turn (a memory-extraction subagent):
    # off, as anyone running a small local model would want it.
    SETTINGS = {'general': {'enableAutoUpdate': False},
                'memory': {'enableManagedAutoMemory': False, 'enableManagedAutoDream': False}}

    def setup(self, home, base):
        _write(os.path.join(home, '.qwen', 'settings.json'), json.dumps(self.SETTINGS, indent=2))
        return {k: v.format(base=base) for k, v in self.ENV.items()}

    def argv(self, prompt):
        return ['-p', prompt]

    def readme(self, section):
        missing = Agent.readme(self, section)
        return missing + ([] if json.dumps(self.SETTINGS) in section else [json.dumps(self.SETTINGS)])


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

    def readme(self, section):
        missing = Agent.readme(self, section)
        want = json.loads(json.dumps(self.CONFIG).replace('{base}', README_BASE))
        blocks = re.findall(r'```json\n(.*?)```', section, re.S)
        if not any(json.loads(b) == want for b in blocks):
            missing.append('opencode.json: ' + json.dumps(want))
        return missing


AGENTS = [ClaudeCode(), Codex(), QwenCode(), OpenCode()]


def readme_sections(readme_text):
    """{package: its section's text} from the README's "## Coding agents" part."""
    part = readme_text.split('\n## Coding agents\n', 1)[-1].split('\n## ', 1)[0]
    out = {}
    for sec in part.split('\n### ')[1:]:
        m = re.search(r'\(`([^`]+)`', sec.splitlines()[0])
        if m:
            out[m.group(1)] = sec
    return out


def agent_env(agent, home, base):
    """The whole environment of one run: PATH and the locale from ours, nothing else of it."""
    env = {k: os.environ[k] for k in ('PATH', 'LANG', 'TERM') if k in os.environ}
    env.update(_home_env(home))
    env['NO_COLOR'] = '1'
    env.update(agent.setup(home, base))
    return env
