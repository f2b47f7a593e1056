"""The PostgreSQL fixture isolates each test in its own schema."""

import pytest
import sqlalchemy as sa


@pytest.mark.postgres
def test_each_test_gets_an_empty_private_schema(postgres_url: str) -> None:
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as connection:
            assert connection.execute(sa.text("select current_schema()")).scalar() == (
                postgres_url.rsplit("%3D", 1)[1]
            )
            connection.execute(sa.text("create table probe (x int)"))
            connection.execute(sa.text("insert into probe values (1)"))
            assert connection.execute(sa.text("select count(*) from probe")).scalar() == 1
    finally:
        engine.dispose()
