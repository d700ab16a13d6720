use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:<order_id>")]
async fn place_order(user_id: u64, voucher_id: u64) -> Result<(), LockError> {
    Ok(())
}

struct Account {
    id: u64,
}

impl Account {
    // `self` is not a parameter of an associated function.
    #[distributed_lock(key = "account:<self.id>")]
    async fn open(id: u64) -> Result<(), LockError> {
        Ok(())
    }
}

#[distributed_lock(key = "nothing:<x>")]
async fn no_parameters() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
