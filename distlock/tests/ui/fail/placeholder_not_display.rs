use distlock::{distributed_lock, LockError};

struct UserId(u64);

struct Request {
    user: UserId,
}

#[distributed_lock(key = "order:<user_id>")]
async fn not_display(user_id: UserId) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:<req.usr>")]
async fn no_such_field(req: Request) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
