"""No test keeps state in the user's folders: every default path of the server's settings
(its store, its log's key, its snapshots) resolves under the session's temp folder, in a
test, in a module-scoped fixture (made before any test's own folder is set) and through
the settings helpers of the app under test (tests/conftest.py sets the data folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specserver.settings import ServerSettings, default_database_path
from tests.reliability.apps import make_settings
from tests.support.served import settings_for


def _defaults(settings: ServerSettings) -> list[Path]:
    return [settings.resolved_snapshot_dir, settings.resolved_log_key_file,
            default_database_path()]


@pytest.fixture(scope="module")
def module_defaults() -> list[Path]:
    return _defaults(ServerSettings())


def _assert_temporary(paths: list[Path], base: Path) -> None:
    home = Path.home().resolve()
    for path in paths:
        assert path.resolve().is_relative_to(base.resolve()), path
        # The session's temp folder is outside the home on Linux (/tmp), but say it plainly.
        assert not path.resolve().is_relative_to(home / ".local"), path


def test_server_defaults_in_a_test_are_temporary(tmp_path_factory: pytest.TempPathFactory
                                                 ) -> None:
    _assert_temporary(_defaults(ServerSettings()), tmp_path_factory.getbasetemp())


def test_server_defaults_in_a_module_fixture_are_temporary(
        module_defaults: list[Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    _assert_temporary(module_defaults, tmp_path_factory.getbasetemp())


def test_each_test_has_its_own_data_folder(module_defaults: list[Path]) -> None:
    # A module's apps share a folder; a test's own is another (and another test's too).
    assert ServerSettings().resolved_snapshot_dir != module_defaults[0]


def test_the_helpers_settings_keep_everything_temporary(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    for settings in (settings_for(tmp_path), make_settings(tmp_path)):
        _assert_temporary(_defaults(settings), tmp_path_factory.getbasetemp())

